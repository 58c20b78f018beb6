// The request fields beyond prompt and sampling: which fields exist (supported, accepted and
// ignored, or refused), logit_bias, structured output and tools. Internal to the protocol.
#pragma once

#include <string>
#include <vector>

#include "server/openai_protocol.h"

namespace mx {

// A field this server does not support is a 400 naming it; an unknown one is listed in
// `ignored` (vLLM ignores unknown fields too).
bool check_fields(const OJson& body, bool chat, std::vector<std::string>* ignored, HttpError* err);

// {"token id": bias in [-100, 100]} with ids inside the vocabulary, as OpenAI's and vLLM's.
bool parse_logit_bias(const OJson& body, const ProtocolContext& ctx, SamplingParams* p,
                      HttpError* err);

// response_format (json_object, json_schema), vLLM's guided_json / guided_regex /
// guided_choice and structured_outputs {json, regex, choice}: at most one of them, compiled.
bool parse_structured_output(const OJson& body, std::shared_ptr<const Grammar>* grammar,
                             HttpError* err);

// tools, tool_choice and parallel_tool_calls: their shapes (the tool parser checks the rest).
bool parse_tools(const OJson& body, ParsedRequest* out, HttpError* err);

}  // namespace mx
