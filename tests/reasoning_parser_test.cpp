// The qwen3 reasoning parser: hand-written splits of replies (think opened by the reply or by
// the prompt, closed, cut short, ended by a qwen3_coder call, absent), whole and streamed in
// chunks of every size and at random splits; and where a rendered prompt leaves the reply,
// with the real chat template.
#include <gtest/gtest.h>

#include <random>

#include "server/reasoning_parser.h"
#include "test_util.h"
#include "text/chat_template.h"

namespace mx {
namespace {

struct Case {
  const char* name;
  bool starts_in_reasoning;
  std::string reply;
  std::string reasoning, content;
};

std::vector<Case> cases() {
  return {
      {"reply opens think", false, "<think>\nStep one.\nStep two.\n</think>\n\nThe answer is 4.",
       "Step one.\nStep two.", "The answer is 4."},
      {"whitespace before think", false, "\n <think>x</think>y", "x", "y"},
      {"no think", false, "Plain answer.\n", "", "Plain answer.\n"},
      {"no think, leading newlines kept", false, "\n\nAnswer", "", "\n\nAnswer"},
      {"think not at the start is text", false, "Use <think> tags.</think> ok", "",
       "Use <think> tags.</think> ok"},
      {"empty think (thinking disabled by the model)", false, "<think>\n\n</think>\n\nHi", "",
       "Hi"},
      {"cut short while thinking", false, "<think>\nLet me see\n\n", "Let me see", ""},
      {"only the opening tag", false, "<think>", "", ""},
      {"a partial opening tag is content", false, "<thin", "", "<thin"},
      {"prompt opened think", true, "The user asks.\n</think>\n\n42", "The user asks.", "42"},
      {"prompt opened, reply repeats the tag", true, "<think>\nHmm.\n</think>\n\nOk", "Hmm.", "Ok"},
      {"prompt opened, no end: all reasoning", true, "\nStill thinking about it",
       "Still thinking about it", ""},
      {"prompt opened, empty reply", true, "", "", ""},
      {"content keeps inner newlines and spaces", true, "r\n</think>\n\n  a\n\nb\n", "r",
       "  a\n\nb\n"},
      {"second think end is content", true, "a</think>b</think>c", "a", "b</think>c"},
      {"qwen3_coder call ends reasoning", true,
       "I will call it.\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>", "I will call it.",
       "<tool_call>\n<function=f>\n</function>\n</tool_call>"},
      {"call tag then space then function", true, "x<tool_call> <function name=\"f\">", "x",
       "<tool_call> <function name=\"f\">"},
      {"hermes call inside think stays reasoning", true,
       "maybe <tool_call>\n{\"name\": \"f\"}\n</tool_call>\n</think>\n\nno",
       "maybe <tool_call>\n{\"name\": \"f\"}\n</tool_call>", "no"},
      {"tag mentioned, then the end", true, "the <tool_call> tag\n</think>\nok",
       "the <tool_call> tag", "ok"},
      {"<functional> is not a call", true, "<tool_call>\n<functional>\n</think>x",
       "<tool_call>\n<functional>", "x"},
      {"undecided call at the end is reasoning", true, "abc\n<tool_call>\n<function",
       "abc\n<tool_call>\n<function", ""},
      {"think end before a call", true, "r</think>\n<tool_call>\n<function=f>", "r",
       "<tool_call>\n<function=f>"},
      {"unicode", true, "考え中…\n</think>\n\nこんにちは 🙂", "考え中…",
       "こんにちは 🙂"},
  };
}

ReasoningSplit stream(const std::vector<std::string>& chunks, bool sir) {
  ReasoningParser p(sir);
  ReasoningSplit all;
  auto add = [&all](const ReasoningSplit& s) {
    all.reasoning += s.reasoning;
    all.content += s.content;
  };
  for (const std::string& c : chunks) add(p.push(c));
  add(p.finish());
  return all;
}

TEST(ReasoningParser, WholeAndStreamedAgreeWithHandWrittenSplits) {
  std::mt19937 rng(11);
  int runs = 0;
  for (const Case& c : cases()) {
    const ReasoningSplit whole = ReasoningParser(c.starts_in_reasoning).parse(c.reply);
    EXPECT_EQ(whole.reasoning, c.reasoning) << c.name;
    EXPECT_EQ(whole.content, c.content) << c.name;
    for (size_t n = 1; n <= c.reply.size() + 1; ++n) {
      std::vector<std::string> chunks;
      for (size_t i = 0; i < c.reply.size(); i += n) chunks.push_back(c.reply.substr(i, n));
      const ReasoningSplit s = stream(chunks, c.starts_in_reasoning);
      EXPECT_EQ(s.reasoning, c.reasoning) << c.name << ", chunks of " << n;
      EXPECT_EQ(s.content, c.content) << c.name << ", chunks of " << n;
      ++runs;
    }
    std::uniform_int_distribution<size_t> len(0, 6);
    for (int k = 0; k < 100; ++k) {
      std::vector<std::string> chunks;
      for (size_t i = 0; i < c.reply.size();) {
        const size_t n = std::min(len(rng), c.reply.size() - i);
        chunks.push_back(c.reply.substr(i, n));
        i += n;
      }
      const ReasoningSplit s = stream(chunks, c.starts_in_reasoning);
      EXPECT_EQ(s.reasoning, c.reasoning) << c.name << ", random split " << k;
      EXPECT_EQ(s.content, c.content) << c.name << ", random split " << k;
      ++runs;
    }
    if (testing::Test::HasFailure()) return;
  }
  std::printf("reasoning cases: %zu, streamed %d ways in all\n", cases().size(), runs);
}

TEST(ReasoningParser, StreamSendsReasoningAsItComes) {
  ReasoningParser p(true);
  EXPECT_EQ(p.push("\nFirst").reasoning, "First");
  EXPECT_EQ(p.push(" idea.\n").reasoning, " idea.");  // the newline may end the reasoning
  const ReasoningSplit a = p.push("More.</thi");
  EXPECT_EQ(a.reasoning, "\nMore.");
  EXPECT_EQ(a.content, "");
  const ReasoningSplit b = p.push("nk>\n\nDone");
  EXPECT_EQ(b.reasoning, "");
  EXPECT_EQ(b.content, "Done");
  EXPECT_EQ(p.push(" now").content, " now");
  const ReasoningSplit end = p.finish();
  EXPECT_EQ(end.reasoning + end.content, "");
}

TEST(ReasoningParser, PromptDecidesTheStart) {
  EXPECT_TRUE(
      prompt_starts_in_reasoning("<|im_start|>user\nhi<|im_end|>\n"
                                 "<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_starts_in_reasoning("<|im_start|>assistant\n<think>"));
  EXPECT_TRUE(prompt_starts_in_reasoning("<|im_start|>assistant\n<think>\nPartial thought"));
  EXPECT_FALSE(prompt_starts_in_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_starts_in_reasoning("<|im_start|>user\n<think>\n"));
  EXPECT_FALSE(prompt_starts_in_reasoning(""));
  // A think block of an earlier turn does not count, only the turn being generated.
  EXPECT_FALSE(prompt_starts_in_reasoning(
      "<|im_start|>assistant\n<think>\nold\n<|im_end|>\n<|im_start|>assistant\n"));

  auto tmpl = ChatTemplate::load(test::source_dir() + "/models/tiny-qwen3-moe");
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  const auto msgs = nlohmann::ordered_json::parse(R"([{"role":"user","content":"Hi"}])");
  auto thinking = tmpl->apply(msgs, true);
  auto no_think = tmpl->apply(msgs, true, {{"enable_thinking", false}});
  ASSERT_TRUE(thinking.is_ok() && no_think.is_ok());
  // Qwen3's template lets the model open <think> itself; enable_thinking=false closes it.
  EXPECT_FALSE(prompt_starts_in_reasoning(*thinking));
  EXPECT_FALSE(prompt_starts_in_reasoning(*no_think));
  EXPECT_TRUE(prompt_starts_in_reasoning(*thinking + "<think>\n"));
}

TEST(ReasoningParser, Names) {
  EXPECT_TRUE(check_reasoning_parser_name("qwen3").is_ok());
  const Status s = check_reasoning_parser_name("deepseek_r1");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'deepseek_r1'"), std::string::npos);
}

}  // namespace
}  // namespace mx
