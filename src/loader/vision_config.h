// Reading a multimodal checkpoint's vision fields into ModelConfig (see VisionConfig).
#pragma once

#include <string>

#include "core/json_util.h"
#include "loader/model_config.h"

namespace mx {

// `rope_parameters` of the text model: mrope_section and mrope_interleaved. After rotary_dim.
Status parse_mrope_fields(const Json& rope_parameters, const std::string& what, ModelConfig* c);
// `vision_config` and the image token ids of the top-level config (absent: c->vision stays
// empty). After the language model's fields.
Status parse_vision_config(const Json& top, const std::string& what, ModelConfig* c);

}  // namespace mx
