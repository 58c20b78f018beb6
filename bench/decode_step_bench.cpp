// One batched decode step of the bundled model over a paged KV cache, for batch sizes 1..16:
// tokens/s per batch size shows what continuous batching gains over one sequence at a time
// (the ratio of B > 1 to B = 1 in the same run).
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "model/model.h"

namespace mx {
namespace {

constexpr int64_t kContext = 128;  // cached tokens per sequence before the measured step

DecoderModel& bundled() {
  static std::unique_ptr<DecoderModel> m = [] {
    LoadOptions opt;
    opt.threads = 2;
    auto r = load_model(std::string(MX_SOURCE_DIR) + "/models/tiny-qwen3-moe", opt);
    if (!r.is_ok()) std::abort();
    return std::move(r).value();
  }();
  return *m;
}

void BM_DecodeStep(benchmark::State& state) {
  DecoderModel& m = bundled();
  const int64_t batch = state.range(0);
  const int32_t bs = 16;
  const int32_t per_seq = static_cast<int32_t>((kContext + 1 + bs - 1) / bs);
  PagedKv kv(m.config(), static_cast<int32_t>(batch) * per_seq, bs);
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(batch));
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  std::vector<SeqSlice> prefill, step;
  for (int64_t b = 0; b < batch; ++b) {
    auto& t = tokens[static_cast<size_t>(b)];
    for (int64_t i = 0; i <= kContext; ++i)
      t.push_back(static_cast<int32_t>((b * 131 + i * 7) % 4000));
    auto& tab = tables[static_cast<size_t>(b)];
    tab.resize(static_cast<size_t>(per_seq));
    std::iota(tab.begin(), tab.end(), static_cast<int32_t>(b) * per_seq);
    prefill.push_back({t.data(), kContext, 0, tab.data(), SeqSlice::Logits::kLast});
    step.push_back({t.data() + kContext, 1, kContext, tab.data(), SeqSlice::Logits::kLast});
  }
  std::vector<float> logits(static_cast<size_t>(batch * m.config().vocab_size));
  if (!m.forward_batch(prefill, kv, logits.data()).is_ok()) std::abort();
  for (auto _ : state) {
    // Rewrites the same position each time: the cost of a step at context kContext.
    if (!m.forward_batch(step, kv, logits.data()).is_ok()) std::abort();
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_DecodeStep)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime();

}  // namespace
}  // namespace mx
