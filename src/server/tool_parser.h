// Tool calls in chat replies, in the two forms Qwen models write them:
//   hermes (Qwen3):       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   qwen3_coder (Qwen3.5): <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n
//                          </function>\n</tool_call>
// Parsed from a whole reply or as it streams (both give the same result for any split of the
// text), plus what a request with tools needs around them: validation of `tools` and
// `tool_choice`, the grammars that force a call (tool_choice "required" or a named function),
// and the conversation prepared for the chat template.
//
// Contract with the reasoning parser: it runs first and the tool parser sees only the content
// part of the reply, so a call written inside <think>...</think> is reasoning, not a call.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/openai_protocol.h"
#include "text/grammar.h"

namespace mx {

enum class ToolCallFormat { kHermes, kQwen3Coder };

// "hermes" or "qwen3_coder"; anything else fails naming the choices.
Result<ToolCallFormat> tool_call_format_from_name(std::string_view name);
const char* tool_call_format_name(ToolCallFormat format);
// The parser a chat template's tool-call examples call for: "qwen3_coder" when it writes
// <function= or <parameter=, "hermes" when it writes <tool_call>, "" when neither.
std::string tool_parser_for_template(std::string_view template_text);
// "auto" resolves by the template (failing when it shows no tool-call form), other names as
// tool_call_format_from_name.
Result<ToolCallFormat> resolve_tool_parser(std::string_view name, std::string_view template_text);

struct ToolCall {
  std::string id;  // call_ + 24 random letters and digits
  std::string name;
  std::string arguments;  // a JSON object, serialized, as OpenAI sends it
};

struct ParsedToolCalls {
  std::string content;  // the reply without its calls; may be empty
  std::vector<ToolCall> calls;
};

// One piece of a streamed reply: content to send now, or a piece of a tool call. The first
// piece of a call carries its index, id and name (arguments ""); the next ones carry only
// more arguments text, whose concatenation is the call's arguments.
struct ToolStreamEvent {
  bool is_call = false;
  std::string content;  // !is_call
  int index = 0;        // is_call: the call's position among this reply's calls
  bool first = false;   // is_call: the piece that opens the call
  std::string id, name;
  std::string arguments;
};

// One parser per reply. Rules shared by both forms:
// - Text outside calls is content. Whitespace that touches a call (before it, between two
//   calls, after the last one) is not content: the templates write it around calls.
// - A block whose inside does not parse (bad JSON, a missing name, a broken tag structure)
//   is not a call: its raw text, tags included, stays in the content.
// - hermes: the block ends at the first </tool_call>; the inside is one JSON object with a
//   string "name" and an object "arguments" (or a string holding one).
// - qwen3_coder: inside a parameter value only </parameter> ends it, so a value may hold
//   "</tool_call>" (code, say). Values are typed by the tool's schema
//   (tools[i].function.parameters.properties[P]): integer and number parse as numbers,
//   boolean as true/false, object and array as JSON, "null" as null for types that are not
//   string or admit null; a value that does not parse as its type stays a string. Strings
//   are the text between the tags less one leading and one trailing newline. Parameters the
//   schema does not list are strings. A missing </function> before </tool_call> is forgiven.
// - A block still open when the reply ends is a call when its inside is complete (hermes:
//   the JSON object; qwen3_coder: through </function>), as vLLM reads a reply that stopped
//   at </tool_call>. Otherwise, with no </tool_call> anywhere in it, it was cut short
//   (max_tokens, a stop string) and is dropped: neither a call nor raw tags in the content;
//   one that holds a </tool_call> its structure did not reach is malformed, and content.
// - Streaming: text that may be the start of <tool_call> is held back until decided, and
//   whitespace until it is known not to touch a call. A call is sent when its block closes
//   (or at finish): one piece with the name, then one with the whole arguments, so that a
//   block that turns out malformed never has half a call sent for it.
class ToolCallParser {
 public:
  // `tools`: the request's tools array (or null); qwen3_coder types values by it. Ids come
  // from a generator seeded by `seed`, or from std::random_device when it is absent.
  ToolCallParser(ToolCallFormat format, OJson tools, std::optional<uint64_t> seed = std::nullopt);

  // The whole reply at once; does not touch the streaming state.
  ParsedToolCalls parse(std::string_view text);

  // Streaming: the text's next piece, then finish() once the reply has ended.
  std::vector<ToolStreamEvent> push(std::string_view delta);
  std::vector<ToolStreamEvent> finish();

 private:
  enum class Where { kText, kBlock, kParamName, kValue };
  struct Parsed {
    std::string name, arguments;
  };
  std::optional<Parsed> parse_block(std::string_view block, bool closed) const;
  size_t block_end(std::string_view text, size_t open) const;
  std::string new_id();
  void add_content(std::string_view text, std::vector<ToolStreamEvent>* out);
  void close_block(size_t end, bool closed, std::vector<ToolStreamEvent>* out);
  bool step(std::vector<ToolStreamEvent>* out);

  ToolCallFormat format_;
  OJson tools_;
  std::mt19937_64 rng_;
  // Streaming state. buf_ holds undecided text: a possible start of <tool_call> (kText) or
  // the open block so far; scan_ is where to look next for a tag in it.
  Where where_ = Where::kText;
  std::string buf_;
  size_t scan_ = 0;
  std::string pending_ws_;   // whitespace that is content unless a call follows
  bool after_call_ = false;  // leading whitespace now touches the previous call
  int calls_ = 0;
};

// The `delta` object of a chat.completion.chunk for one event: {"content": ...} or
// {"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments"}}]}
// (a following piece: {"tool_calls": [{"index", "function": {"arguments"}}]}).
OJson tool_stream_delta_json(const ToolStreamEvent& event);
// A message's "tool_calls" list: [{"id", "type": "function", "function": {"name",
// "arguments"}}].
OJson tool_calls_json(const std::vector<ToolCall>& calls);

// --- Requests with tools -------------------------------------------------------------------

struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kNamed };
  Mode mode = Mode::kNone;
  std::string function;  // kNamed
};

// `tools` null or a list of {"type": "function", "function": {"name": string, "parameters"?:
// object}}; errors name the field ("tools[1].function.name: ...").
Status validate_tools(const OJson& tools);
// "none", "auto", "required" or {"type": "function", "function": {"name": N}} with N among
// the tools; null means "auto" with tools and "none" without. `tools` must be valid.
Result<ToolChoice> parse_tool_choice(const OJson& tool_choice, const OJson& tools);

// One alternative per tool (only `only_function` when given) for grammar_from_sequences:
//   hermes:      <tool_call>\n{"name": "NAME", "arguments": <json of the parameters schema>}
//                \n</tool_call>
//   qwen3_coder: <tool_call>\n<function=NAME>\n then <parameter=P>\nVALUE\n</parameter>\n per
//                parameter, then </function>\n</tool_call>
// qwen3_coder writes the required parameters and, when a tool has at most
// kMaxEnumeratedOptional optional ones, any subset of those (one alternative per subset),
// always in the schema's order; with more, optional parameters are left out. A string value
// is any text without "</" (or one of its enum strings), other types the JSON of their schema.
// `tools` must be valid; an unknown `parser` gives no alternatives.
inline constexpr int kMaxEnumeratedOptional = 3;
std::vector<GrammarSequence> tool_call_sequences(const OJson& tools, const std::string& parser,
                                                 std::optional<std::string> only_function);

// What constrained decoding enforces for a tool_choice: `alternatives` repeated between
// min_repeat and max_repeat times (< 0: unbounded) joined by `separator`.
struct ToolCallGrammar {
  std::vector<GrammarSequence> alternatives;
  int min_repeat = 1;
  int max_repeat = 1;
  std::string separator = "\n";
};
// Validates tools and tool_choice (and, for qwen3_coder, that parameter names can be written
// in its tags); nullopt for "auto" and "none", which leave decoding free.
Result<std::optional<ToolCallGrammar>> tool_call_grammar(const OJson& tools,
                                                         const OJson& tool_choice,
                                                         const std::string& parser);

// The request's messages as the chat templates expect them: an assistant message's
// tool_calls[i].function.arguments given as a JSON string (as OpenAI clients send it) is
// decoded to the object (templates iterate or re-serialize it; vLLM does the same), an empty
// or null one becomes {}, and a string that is not a JSON object stays as it is. Other
// messages, tool results included, are unchanged.
OJson messages_for_template(const OJson& messages);

}  // namespace mx
