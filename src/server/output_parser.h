// The chat reply's parts from its raw text: reasoning (`--reasoning-parser`) first, then
// tool calls in what remains (`--tool-call-parser`), whole or as the text streams.
#pragma once

#include <memory>
#include <string>

#include "server/completion_job.h"

namespace mx {

// `tool_parser` "" leaves calls in the content, `reasoning` "" leaves think blocks in it;
// `in_think`: the prompt opened a think block, so the reply starts inside it;
// `parallel_calls` false reports only the first call (parallel_tool_calls: false).
std::unique_ptr<OutputParser> make_output_parser(const std::string& tool_parser,
                                                 const std::string& reasoning, bool in_think,
                                                 const OJson& tools, bool parallel_calls = true);

// The rendered prompt ends inside an open think block (Qwen3.5's template opens one).
bool prompt_opens_think(const std::string& prompt_text);

}  // namespace mx
