// Tokenizer encode throughput on English prose (the bundled model's held-out text), one core.
// The first pass fills the piece cache as a server's steady state would.
#include <benchmark/benchmark.h>

#include "core/mapped_file.h"
#include "text/tokenizer.h"

namespace mx {
namespace {

void BM_EncodeProse(benchmark::State& state) {
  auto text =
      read_text_file(std::string(MX_SOURCE_DIR) + "/models/tiny-qwen3-moe/eval/prose_heldout.txt");
  auto tok = Tokenizer::load(std::string(MX_SOURCE_DIR) + "/models/tiny-qwen3-moe");
  if (!text.is_ok() || !tok.is_ok()) {
    state.SkipWithError("bundled model files missing");
    return;
  }
  const std::string chunk = text->substr(0, static_cast<size_t>(state.range(0)));
  size_t tokens = 0;
  for (auto _ : state) {
    tokens = (*tok)->encode(chunk).size();
    benchmark::DoNotOptimize(tokens);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(chunk.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_EncodeProse)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mx
