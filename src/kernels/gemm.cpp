#include "kernels/gemm.h"

#include <bit>

#include "core/isa_table.h"

namespace mx {
namespace gemm_detail {
namespace {

void bf16_reference(const GemmBf16Args& a, int64_t n_begin, int64_t n_end) {
  for (int64_t i = 0; i < a.m; ++i) {
    const float* x = a.x + i * a.ldx;
    for (int64_t n = n_begin; n < n_end; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < a.k; ++k) {
        const uint16_t w = a.w[bf16_panel_index(n, k, a.k)];
        acc += x[k] * std::bit_cast<float>(static_cast<uint32_t>(w) << 16);
      }
      a.y[i * a.ldy + n] = acc;
    }
  }
}

}  // namespace

const GemmKernels kScalarGemm = {IsaLevel::kScalar, pack_bf16_panels, bf16_reference};

}  // namespace gemm_detail

void pack_bf16_panels(const uint16_t* w, int64_t n, int64_t k, int64_t ldw, uint16_t* out) {
  const int64_t total = bf16_panel_elems(n, k);
  for (int64_t i = 0; i < total; ++i) out[i] = 0;
  for (int64_t col = 0; col < n; ++col) {
    for (int64_t kk = 0; kk < k; ++kk) out[bf16_panel_index(col, kk, k)] = w[col * ldw + kk];
  }
}

void pack_bf16_panels_avx512(const uint16_t* w, int64_t n, int64_t k, int64_t ldw, uint16_t* out) {
  const int64_t total = bf16_panel_elems(n, k);
  for (int64_t i = 0; i < total; ++i) out[i] = 0;
  for (int64_t col = 0; col < n; ++col) {
    for (int64_t kk = 0; kk < k; ++kk) out[bf16_panel_index_avx512(col, kk, k)] = w[col * ldw + kk];
  }
}

namespace {
constexpr IsaTable<GemmKernels> kGemmKernelsTable{
    &gemm_detail::kScalarGemm, &gemm_detail::kAvx2Gemm, &gemm_detail::kAvx512Gemm};
}  // namespace

const GemmKernels* gemm_kernels_for(IsaLevel level) { return kGemmKernelsTable.at(level); }

const GemmKernels& gemm_kernels() {
  static const GemmKernels& k = kGemmKernelsTable.select();
  return k;
}

}  // namespace mx
