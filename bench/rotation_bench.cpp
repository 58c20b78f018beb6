// What online block rotation costs: an MX linear of a real shape ([4096, 4096], Qwen3-8B's
// attention output) run on rows with and without --rotation, one thread, in every MX scheme,
// for a decode row and a prefill chunk. Report the rotated time as a ratio to the plain one of
// the same run (the acceptance holds it at 1.05 at most).
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "quant/linear.h"
#include "quant/scheme.h"

namespace mx {
namespace {

constexpr int64_t kN = 4096, kK = 4096;

const std::unique_ptr<Linear>& linear(Scheme s, int64_t rotation) {
  static std::map<std::pair<int, int64_t>, std::unique_ptr<Linear>> cache;
  auto& l = cache[{static_cast<int>(s), rotation}];
  if (!l) {
    Tensor w = Tensor::empty(DType::kF32, {kN, kK});
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 0.02f);
    for (int64_t i = 0; i < kN * kK; ++i) w.mutable_data_as<float>()[i] = d(rng);
    auto q = quantize_weight(w, s, ScaleRule::kFloor, "w", nullptr, rotation);
    l = make_mx_linear(std::move(*q), ScaleRule::kFloor);
  }
  return l;
}

void BM_MxLinearRotation(benchmark::State& state) {
  const auto s = static_cast<Scheme>(state.range(0));
  const int64_t rotation = state.range(1), m = state.range(2);
  const Linear& l = *linear(s, rotation);
  std::vector<float> x(static_cast<size_t>(m * kK)), y(static_cast<size_t>(m * kN));
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& v : x) v = d(rng);
  ExecContext ctx(nullptr);
  for (auto _ : state) {
    l.forward(x.data(), m, y.data(), ctx);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(scheme_info(s).name) +
                 (rotation ? " block" + std::to_string(rotation) : " plain"));
}

void Args(benchmark::internal::Benchmark* b) {
  for (Scheme s :
       {Scheme::kW8A8Mxfp8, Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4, Scheme::kW4A4Mxfp4Dual}) {
    for (int64_t m : {1, 64}) {
      for (int64_t rot : {0, 32, 128}) b->Args({static_cast<int64_t>(s), rot, m});
    }
  }
}

BENCHMARK(BM_MxLinearRotation)->Apply(Args)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mx
