// The vision tower's fields of a multimodal config.json (Qwen3.5, Qwen3-VL): `vision_config`
// beside the language model's `text_config`, the placeholder token ids at the top level, and
// the multimodal rotary sections in the text model's rope parameters.
#include "loader/vision_config.h"

#include <cmath>
#include <string>

namespace mx {
namespace {

Status positive_field(const std::string& what, const char* key, int64_t v) {
  if (v > 0 && v <= kMaxConfigSize) return Status::ok();
  return invalid_argument(what + ": vision_config." + key + " is " + std::to_string(v) +
                          "; it must be positive and at most 2^24");
}

Status parse_activation(const Json& v, const std::string& what, VisionConfig* out) {
  auto a = v.find("hidden_act");
  if (a == v.end() || a->is_null()) return Status::ok();
  if (a->is_string() && (*a == "gelu_pytorch_tanh" || *a == "gelu")) {
    out->mlp_gelu_tanh = *a == "gelu_pytorch_tanh";
    return Status::ok();
  }
  return unimplemented(what + ": vision_config.hidden_act " + a->dump() +
                       " is not supported (gelu_pytorch_tanh or gelu)");
}

}  // namespace

Status parse_mrope_fields(const Json& rope_parameters, const std::string& what, ModelConfig* c) {
  auto s = rope_parameters.find("mrope_section");
  if (s == rope_parameters.end() || s->is_null()) return Status::ok();
  if (!s->is_array() || s->size() != 3) {
    return invalid_argument(what + ": rope_parameters.mrope_section must list 3 integers");
  }
  int64_t total = 0;
  for (size_t i = 0; i < 3; ++i) {
    const Json& e = (*s)[i];
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > kMaxConfigSize) {
      return invalid_argument(what + ": rope_parameters.mrope_section[" + std::to_string(i) +
                              "] is " + e.dump() + "; it must be a non-negative integer");
    }
    c->mrope_section[i] = e.get<int64_t>();
    total += c->mrope_section[i];
  }
  if (total > c->rotary_dim / 2) {
    return invalid_argument(what + ": rope_parameters.mrope_section sums to " +
                            std::to_string(total) + ", past the " +
                            std::to_string(c->rotary_dim / 2) + " rotary frequencies");
  }
  MX_ASSIGN_OR_RETURN(c->mrope_interleaved,
                      json_bool_or(rope_parameters, "mrope_interleaved", false, what));
  if (!c->mrope_interleaved && total > 0) {
    return unimplemented(what + ": rope_parameters.mrope_section without mrope_interleaved " +
                         "(Qwen2-VL's contiguous sections) is not supported");
  }
  return Status::ok();
}

Status parse_vision_config(const Json& top, const std::string& what, ModelConfig* c) {
  auto it = top.find("vision_config");
  if (it == top.end() || it->is_null()) return Status::ok();
  if (!it->is_object()) return invalid_argument(what + ": vision_config is not an object");
  const Json& v = *it;
  VisionConfig& o = c->vision;
  struct Field {
    const char* key;
    int64_t* out;
  };
  for (const Field& f :
       {Field{"depth", &o.depth}, Field{"hidden_size", &o.hidden_size},
        Field{"num_heads", &o.num_heads}, Field{"intermediate_size", &o.intermediate_size},
        Field{"patch_size", &o.patch_size}, Field{"temporal_patch_size", &o.temporal_patch_size},
        Field{"spatial_merge_size", &o.spatial_merge_size},
        Field{"out_hidden_size", &o.out_hidden_size},
        Field{"num_position_embeddings", &o.num_position_embeddings}}) {
    MX_ASSIGN_OR_RETURN(*f.out, json_int(v, f.key, what + " (vision_config)"));
    MX_RETURN_IF_ERROR(positive_field(what, f.key, *f.out));
  }
  MX_ASSIGN_OR_RETURN(o.in_channels, json_int_or(v, "in_channels", 3, what));
  MX_RETURN_IF_ERROR(positive_field(what, "in_channels", o.in_channels));
  if (o.depth > kMaxLayers) {
    return invalid_argument(what + ": vision_config.depth " + std::to_string(o.depth) +
                            " exceeds " + std::to_string(kMaxLayers));
  }
  if (o.hidden_size % o.num_heads != 0 || (o.hidden_size / o.num_heads) % 4 != 0) {
    return invalid_argument(what + ": vision_config.hidden_size " + std::to_string(o.hidden_size) +
                            " over " + std::to_string(o.num_heads) +
                            " heads does not give a head width divisible by 4 (2-D rotary)");
  }
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(o.num_position_embeddings)));
  if (side * side != o.num_position_embeddings) {
    return invalid_argument(what + ": vision_config.num_position_embeddings " +
                            std::to_string(o.num_position_embeddings) + " is not a square");
  }
  if (o.out_hidden_size != c->hidden_size) {
    return invalid_argument(
        what + ": vision_config.out_hidden_size " + std::to_string(o.out_hidden_size) +
        " differs from the language model's hidden_size " + std::to_string(c->hidden_size));
  }
  MX_RETURN_IF_ERROR(parse_activation(v, what, &o));
  MX_ASSIGN_OR_RETURN(o.deepstack_indexes, json_int_list_or(v, "deepstack_visual_indexes", what));
  for (int64_t d : o.deepstack_indexes) {
    if (d < 0 || d >= o.depth) {
      return invalid_argument(what + ": vision_config.deepstack_visual_indexes names block " +
                              std::to_string(d) + " of " + std::to_string(o.depth));
    }
  }
  struct Id {
    const char* key;
    int64_t* out;
  };
  for (const Id& f :
       {Id{"image_token_id", &o.image_token_id}, Id{"video_token_id", &o.video_token_id},
        Id{"vision_start_token_id", &o.vision_start_token_id},
        Id{"vision_end_token_id", &o.vision_end_token_id}}) {
    MX_ASSIGN_OR_RETURN(*f.out, json_int_or(top, f.key, -1, what));
    if (*f.out >= c->vocab_size) {
      return invalid_argument(what + ": " + f.key + " " + std::to_string(*f.out) +
                              " is past the vocabulary of " + std::to_string(c->vocab_size));
    }
  }
  if (o.image_token_id < 0) {
    return invalid_argument(what + ": a vision_config without an image_token_id");
  }
  return Status::ok();
}

}  // namespace mx
