// A linear layer as the model sees it: y[m, out] = x[m, in] * W^T with FP32 activations.
// How W is stored and multiplied is the scheme's business; layers never branch on formats.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/exec_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "formats/ggml_types.h"
#include "quant/scheme.h"

namespace mx {

// The execution context's slots that the schemes borrow (core/exec_context.h). A scheme uses
// them only within one forward or run call; the layers above number theirs from the counts.
enum QuantWsSlot : int {
  kWsActiveExperts,
  kWsGgmlActs,  // four: two dot-product types, for the input and for a bank's gmm2
  kWsGgmlUnits = kWsGgmlActs + 4,
  kWsGgmlGateUp,
  kWsMxActs,  // six: one prepared activation layout (GemmActs in mx_scheme.cpp)
  kWsMxRow = kWsMxActs + 6,
  kWsBf16Act,
  kQuantWsSlots
};
enum QuantArenaSlot : int {
  kArenaGgmlGemm,
  kArenaGgmlChunk,
  kArenaMxTile,
  kArenaBf16GateUp,
  kQuantArenaSlots
};
enum QuantObjectSlot : int { kObjMxLinearRows, kObjMxConverted, kObjMxAct, kQuantObjectSlots };

class Linear {
 public:
  virtual ~Linear() = default;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  virtual std::string scheme_name() const = 0;
  // The kernel table that laid the weights out at load, and so the one that runs them:
  // "family:table" ("gemm:avx512", "mx_gemm:avx512-bf16", "ggml_dot:avx2").
  virtual std::string kernel_table() const = 0;
  virtual uint64_t weight_bytes() const = 0;
  // x: [m, in] contiguous; y: [m, out] contiguous.
  // Runs on ctx's pool, with its buffers.
  virtual void forward(const float* x, int64_t m, float* y, ExecContext& ctx) const = 0;

 protected:
  Linear(int64_t in, int64_t out) : in_(in), out_(out) {}

 private:
  int64_t in_, out_;
};

// BF16 weights [out, in]. `parts` are stacked along the output dimension into one matmul
// (q/k/v -> qkv, gate/up -> gate_up); F16 and F32 parts are rounded to BF16 once at load.
Result<std::unique_ptr<Linear>> make_bf16_linear(const std::vector<Tensor>& parts,
                                                 const std::string& name);

// Stacks 2-D tensors along dim 0 into one BF16 tensor (converting F16/F32).
Result<Tensor> stack_rows_bf16(const std::vector<Tensor>& parts, const std::string& name);

// How routed rows reach the experts (ARCHITECTURE.md section 4).
enum class DispatchMode { kLocal, kEpLowLatency, kEpNormal };
// Floating-point rows on the wire.
enum class RowFloat { kF32, kBf16 };

// Seconds spent in each grouped GEMM of a run() call, for profiles.
struct ExpertTimes {
  double gmm1 = 0;  // gate/up with its SwiGLU + requantization epilogue
  double gmm2 = 0;  // down
};

// One parallel loop over every (active expert, `unit`-column block) pair of a grouped GEMM
// with `cols` output columns per expert, instead of one loop per expert: a decode step routes
// a few rows to many experts, and a thread wake-up per expert costs more than its GEMM.
// fn(expert, col_begin, col_end, thread) runs on the pool's threads.
template <typename Fn>
void for_each_expert_block(std::span<const int64_t> active, int64_t cols, ThreadPool* pool,
                           int64_t work, Fn&& fn, int64_t unit = 16) {
  const int64_t per = (cols + unit - 1) / unit;
  const int64_t total = static_cast<int64_t>(active.size()) * per;
  auto body = [&](int64_t b, int64_t e, int thread) {
    for (int64_t idx = b; idx < e;) {
      const int64_t slot = idx / per, blk0 = idx % per;
      const int64_t blk1 = std::min(per, blk0 + (e - idx));
      fn(active[static_cast<size_t>(slot)], blk0 * unit, std::min(cols, blk1 * unit), thread);
      idx += blk1 - blk0;
    }
  };
  if (pool == nullptr || pool->num_threads() == 1 || work < (1 << 15)) {
    body(0, total, 0);
  } else {
    pool->parallel_for(total, body);
  }
}

// Attributes the time since the previous lap to a counter; does nothing without times.
class SplitClock {
 public:
  explicit SplitClock(const ExpertTimes* times) : on_(times != nullptr) {
    if (on_) last_ = std::chrono::steady_clock::now();
  }
  void lap(double* into) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    *into += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_;
};

// The experts with rows under `offsets` (expert e has rows [offsets[e], offsets[e + 1])), in id
// order, in ctx's slot kWsActiveExperts; *max_rows gets the most rows any of them has.
inline std::span<const int64_t> active_experts(const int64_t* offsets, int64_t num_experts,
                                               ExecContext& ctx, int64_t* max_rows) {
  int64_t* active = ctx.workspace().get<int64_t>(kWsActiveExperts, num_experts);
  size_t count = 0;
  *max_rows = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (offsets[e + 1] == offsets[e]) continue;
    active[count++] = e;
    *max_rows = std::max(*max_rows, offsets[e + 1] - offsets[e]);
  }
  return {active, count};
}

// One expert bank of a MoE layer: per expert, gate/up [2I, H] and down [H, I].
class ExpertBank {
 public:
  virtual ~ExpertBank() = default;
  int64_t num_experts() const { return experts_; }
  int64_t hidden() const { return hidden_; }
  int64_t inter() const { return inter_; }
  virtual std::string scheme_name() const = 0;
  // As Linear::kernel_table.
  virtual std::string kernel_table() const = 0;
  virtual uint64_t weight_bytes() const = 0;
  // The activation format gmm1 consumes in `mode`; the dispatcher writes rows in exactly this
  // format (FP32 rows travel as BF16 on the wire between ranks).
  virtual RowFormat input_format(DispatchMode mode) const = 0;
  // The format expert outputs travel back in between ranks (one process keeps FP32).
  virtual RowFloat combine_format(DispatchMode mode) const {
    return mode == DispatchMode::kLocal ? RowFloat::kF32 : RowFloat::kBf16;
  }
  // Rows grouped by expert: expert e owns rows [offsets[e], offsets[e+1]). Rows in the
  // declared format go straight to gmm1; FP32 rows are quantized by gmm1 itself (counted in
  // gmm1_quantize_passes). out: [rows, H] FP32, unweighted.
  virtual void run(const ActRows& rows, const int64_t* offsets, float* out, ExecContext& ctx,
                   ExpertTimes* times = nullptr) const = 0;
  // Rows gmm1 had to quantize itself since construction: zero on the fused path.
  uint64_t gmm1_quantize_passes() const { return gmm1_quant_passes_; }

 protected:
  ExpertBank(int64_t e, int64_t h, int64_t i) : experts_(e), hidden_(h), inter_(i) {}
  mutable uint64_t gmm1_quant_passes_ = 0;

 private:
  int64_t experts_, hidden_, inter_;
};

// MX weights for a dense linear (online or offline); activations are quantized per row to
// the scheme's input format with `rule`.
std::unique_ptr<Linear> make_mx_linear(MxWeights w, ScaleRule rule);
// MX expert bank: w13[e] is gate then up stacked ([2I, H]), w2[e] is [H, I].
Result<std::unique_ptr<ExpertBank>> make_mx_expert_bank(std::vector<MxWeights> w13,
                                                        std::vector<MxWeights> w2, ScaleRule rule,
                                                        const std::string& name);
// The same, packing one expert at a time as `next(e)` yields its (w13, w2) for e = 0, 1, ...:
// a loader then never holds more than one expert's quantized weights beside the bank.
using MxExpertSource = std::function<Result<std::pair<MxWeights, MxWeights>>(int64_t expert)>;
Result<std::unique_ptr<ExpertBank>> make_mx_expert_bank(int64_t experts, const MxExpertSource& next,
                                                        ScaleRule rule, const std::string& name);

// BF16 bank from per-expert tensors: gate[e], up[e] are [I, H]; down[e] is [H, I].
Result<std::unique_ptr<ExpertBank>> make_bf16_expert_bank(const std::vector<Tensor>& gate,
                                                          const std::vector<Tensor>& up,
                                                          const std::vector<Tensor>& down,
                                                          const std::string& name);
// The same, one expert at a time as `next(e)` yields its {gate, up, down}.
using Bf16ExpertSource = std::function<Result<std::array<Tensor, 3>>(int64_t expert)>;
Result<std::unique_ptr<ExpertBank>> make_bf16_expert_bank(int64_t experts,
                                                          const Bf16ExpertSource& next,
                                                          const std::string& name);

// A weight [out, in] in ggml blocks as a GGUF stores it: rows U8 [out, row_bytes].
struct GgmlWeight {
  GgmlType type = GgmlType::kF32;
  Tensor rows;
  int64_t out = 0, in = 0;
  // Nonzero once the kernel table has repacked `rows` into its panels of this many rows
  // (kernels/ggml_dot.h); rows then holds out rounded up to whole panels.
  int panel = 0;
};
// How activations meet weights kept in ggml blocks. kNative: each activation row is quantized
// once to the weight type's dot-product type (Q8_0, Q8_K) and blocks run integer dot
// products (kernels/ggml_dot.h), as llama.cpp computes; F32/F16/BF16 weights keep FP32
// activations. kF32: FP32 activations against blocks dequantized in L1 (kernels/ggml_gemm.h),
// the result of dequantizing at load.
enum class GgmlActivations { kNative, kF32 };

// Weights kept in their blocks (the GGUF default): parts stacked along the output, each in
// its own type. `pool` (may be null) shares the repack into the kernel table's panels.
Result<std::unique_ptr<Linear>> make_ggml_linear(std::vector<GgmlWeight> parts,
                                                 const std::string& name,
                                                 GgmlActivations act = GgmlActivations::kNative,
                                                 ThreadPool* pool = nullptr);
// gate_up[e] = {gate, up} ([I, H] each), down[e] [H, I].
Result<std::unique_ptr<ExpertBank>> make_ggml_expert_bank(
    std::vector<std::vector<GgmlWeight>> gate_up, std::vector<GgmlWeight> down,
    const std::string& name, GgmlActivations act = GgmlActivations::kNative,
    ThreadPool* pool = nullptr);
// FP32 [out, in], as llama.cpp's dequantizers give it.
Tensor dequantize_ggml(const GgmlWeight& w);
// MXFP4 blocks into a single-level E2M1 scheme with no loss (formats/ggml_types.h).
Result<MxWeights> ggml_mxfp4_to_mx(const GgmlWeight& w, Scheme scheme, const std::string& name,
                                   ThreadPool* pool = nullptr);

}  // namespace mx
