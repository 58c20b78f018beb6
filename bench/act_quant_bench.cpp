// Activation quantization throughput (BF16 rows to MXFP8 / MXFP4) per ISA, beside a memcpy of
// the same input bytes in the same run. Bytes/s counts input bytes, so the ratio to memcpy
// reads directly as "fraction of copy speed".
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "formats/act_quant.h"
#include "formats/half.h"
#include "formats/mx_block.h"

namespace mx {
namespace {

constexpr int64_t kK = 2048;

std::vector<uint16_t> make_rows(int64_t rows) {
  std::vector<uint16_t> x(static_cast<size_t>(rows * kK));
  uint32_t s = 12345;
  for (auto& v : x) {
    s = s * 1664525u + 1013904223u;
    const float f = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 8.0f;
    v = float_to_bf16(f);
  }
  return x;
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const auto x = make_rows(rows);
  std::vector<uint16_t> y(x.size());
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), x.size() * sizeof(uint16_t));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.size() * sizeof(uint16_t)));
}

template <bool kFp4>
void BM_Bf16ToMx(benchmark::State& state) {
  const auto isa = static_cast<IsaLevel>(state.range(1));
  const ActQuantKernels* kern = act_quant_kernels_for(isa);
  if (kern == nullptr) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const int64_t rows = state.range(0);
  const auto x = make_rows(rows);
  const int64_t row_bytes = kFp4 ? kK / 2 : kK;
  std::vector<uint8_t> codes(static_cast<size_t>(rows * row_bytes));
  std::vector<uint8_t> scales(static_cast<size_t>(rows * mx_num_blocks(kK)));
  auto fn = kFp4 ? kern->bf16_to_mxfp4 : kern->bf16_to_mxfp8;
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) {
      fn(x.data() + r * kK, kK, ScaleRule::kFloor, codes.data() + r * row_bytes,
         scales.data() + r * mx_num_blocks(kK));
    }
    benchmark::DoNotOptimize(codes.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.size() * sizeof(uint16_t)));
  state.SetLabel(std::string(isa_name(isa)));
}

// Rows: one decode token, a small batch, and a prefill chunk (4 MiB of BF16, past L2).
void Args(benchmark::internal::Benchmark* b) {
  for (int64_t rows : {1, 16, 1024}) {
    for (int isa = 0; isa <= 2; ++isa) b->Args({rows, isa});
  }
}

BENCHMARK(BM_Memcpy)->Arg(1)->Arg(16)->Arg(1024);
BENCHMARK_TEMPLATE(BM_Bf16ToMx, false)->Apply(Args);
BENCHMARK_TEMPLATE(BM_Bf16ToMx, true)->Apply(Args);

}  // namespace
}  // namespace mx
