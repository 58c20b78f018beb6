// The BF16 scheme: weights stay BF16, packed once at load into the GEMM's column panels, and
// the kernel widens them in registers.
#include <array>
#include <cstring>
#include <vector>

#include "formats/half.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "quant/linear.h"

namespace mx {
namespace {

void gemm(const GemmKernels& kern, const float* x, int64_t m, int64_t k, const uint16_t* w,
          int64_t n, float* y, ThreadPool* pool) {
  const GemmBf16Args a{x, w, y, m, k, k, n};
  if (pool == nullptr || pool->num_threads() == 1 || n * m * k < (1 << 16)) {
    kern.bf16(a, 0, n);
    return;
  }
  // Column blocks of 16 keep each thread's weight rows contiguous.
  const int64_t blocks = (n + 15) / 16;
  pool->parallel_for(blocks,
                     [&](int64_t b, int64_t e, int) { kern.bf16(a, b * 16, std::min(n, e * 16)); });
}

// w: [n, k] BF16, contiguous.
Tensor pack(const GemmKernels& kern, const Tensor& w) {
  const int64_t n = w.dim(0), k = w.dim(1);
  Tensor out = Tensor::empty(DType::kBF16, {bf16_panel_elems(n, k)}, Placement::kHugePages);
  kern.pack(w.data_as<uint16_t>(), n, k, k, out.mutable_data_as<uint16_t>());
  return out;
}

std::string table_name(const GemmKernels& kern) {
  return "gemm:" + std::string(isa_name(kern.isa));
}

class Bf16Linear final : public Linear {
 public:
  explicit Bf16Linear(const Tensor& w)
      : Linear(w.dim(1), w.dim(0)), kern_(gemm_kernels()), w_(pack(kern_, w)) {}
  std::string scheme_name() const override { return "bf16"; }
  std::string kernel_table() const override { return table_name(kern_); }
  uint64_t weight_bytes() const override {
    return static_cast<uint64_t>(in_features() * out_features()) * 2;
  }
  void forward(const float* x, int64_t m, float* y, ExecContext& ctx) const override {
    gemm(kern_, x, m, in_features(), w_.data_as<uint16_t>(), out_features(), y, ctx.pool());
  }

 private:
  const GemmKernels& kern_;  // packed w_ in its layout
  Tensor w_;
};

// gate/up are packed as one matrix whose panels alternate: gate units 16j .. 16j+15, then up
// units 16j .. 16j+15. A block of panel pairs gives whole SwiGLU outputs, so gmm1 applies the
// activation while the block is in registers' reach, on the thread that computed it.
class Bf16ExpertBank final : public ExpertBank {
 public:
  // w13: [E, 2I, H], gate rows then up rows; w2: [E, H, I].
  // Empty; filled expert by expert with add().
  Bf16ExpertBank(int64_t experts, int64_t hidden, int64_t inter)
      : ExpertBank(experts, hidden, inter),
        kern_(gemm_kernels()),
        pairs_((inter + kBf16PanelCols - 1) / kBf16PanelCols),
        stride13_(bf16_panel_elems(2 * pairs_ * kBf16PanelCols, hidden)),
        stride2_(bf16_panel_elems(hidden, inter)),
        w13_(Tensor::empty(DType::kBF16, {experts * stride13_}, Placement::kHugePages)),
        w2_(Tensor::empty(DType::kBF16, {experts * stride2_}, Placement::kHugePages)) {}
  // Expert e: gate then up [2I, H] and down [H, I], BF16 row-major.
  void add(int64_t e, const uint16_t* w13, const uint16_t* w2) {
    const int64_t h = hidden(), i = inter(), p = kBf16PanelCols;
    paired_.assign(static_cast<size_t>(2 * pairs_ * p * h), uint16_t{0});
    for (int64_t u = 0; u < i; ++u) {
      const int64_t j = u / p, c = u % p;
      std::copy(w13 + u * h, w13 + (u + 1) * h, paired_.data() + ((2 * j) * p + c) * h);
      std::copy(w13 + (i + u) * h, w13 + (i + u + 1) * h,
                paired_.data() + ((2 * j + 1) * p + c) * h);
    }
    const auto pack = kern_.pack;
    pack(paired_.data(), 2 * pairs_ * p, h, h, w13_.mutable_data_as<uint16_t>() + e * stride13_);
    pack(w2, h, i, i, w2_.mutable_data_as<uint16_t>() + e * stride2_);
  }
  void done_adding() { std::vector<uint16_t>().swap(paired_); }
  std::string scheme_name() const override { return "bf16"; }
  std::string kernel_table() const override { return table_name(kern_); }
  uint64_t weight_bytes() const override {
    return static_cast<uint64_t>(num_experts() * 3 * inter() * hidden()) * 2;
  }
  RowFormat input_format(DispatchMode) const override { return RowFormat::f32(); }
  void run(const ActRows& rows, const int64_t* offsets, float* out, ExecContext& ctx,
           ExpertTimes* times) const override {
    const int64_t h = hidden(), i = inter(), total = offsets[num_experts()];
    constexpr int64_t kP = kBf16PanelCols, kSpan = 6 * kP;  // columns per GEMM call
    SplitClock clock(times);
    ThreadPool* pool = ctx.pool();
    int64_t max_rows = 0;
    const std::span<const int64_t> active = active_experts(offsets, num_experts(), ctx, &max_rows);
    float* act = ctx.workspace().floats(kWsBf16Act, total * i);
    const GemmKernels& kern = kern_;
    const uint16_t* w13 = w13_.data_as<uint16_t>();
    const uint16_t* w2 = w2_.data_as<uint16_t>();
    ctx.reserve_arenas<float>(kArenaBf16GateUp, max_rows * kSpan);
    for_each_expert_block(
        active, 2 * pairs_ * kP, pool, total * 2 * i * h,
        [&](int64_t e, int64_t c0, int64_t c1, int thread) {
          const int64_t r0 = offsets[e], m = offsets[e + 1] - r0;
          float* gu = ctx.arena(thread).floats(kArenaBf16GateUp, max_rows * kSpan);
          for (int64_t q = c0; q < c1; q += kSpan) {
            const int64_t cols = std::min(kSpan, c1 - q);
            const GemmBf16Args a{
                rows.f32.data() + r0 * h, w13 + e * stride13_ + q * h, gu, m, h, h, kSpan};
            kern.bf16(a, 0, cols);
            for (int64_t pair = 0; 2 * kP * pair < cols; ++pair) {
              const int64_t u0 = q / 2 + pair * kP, n = std::min(kP, i - u0);
              for (int64_t r = 0; r < m; ++r) {
                const float* g = gu + r * kSpan + 2 * kP * pair;
                swiglu(g, g + kP, n, act + (r0 + r) * i + u0);
              }
            }
          }
        },
        2 * kP);
    clock.lap(times ? &times->gmm1 : nullptr);
    for_each_expert_block(
        active, h, pool, total * h * i, [&](int64_t e, int64_t c0, int64_t c1, int) {
          const int64_t r0 = offsets[e];
          const GemmBf16Args a{
              act + r0 * i, w2 + e * stride2_, out + r0 * h, offsets[e + 1] - r0, i, i, h};
          kern.bf16(a, c0, c1);
        });
    clock.lap(times ? &times->gmm2 : nullptr);
  }

 private:
  const GemmKernels& kern_;     // packed the weights in its layout
  int64_t pairs_;               // gate/up panel pairs per expert
  int64_t stride13_, stride2_;  // packed elements per expert
  Tensor w13_, w2_;
  std::vector<uint16_t> paired_;  // add()'s staging, released by done_adding()
};

Status check_2d(const Tensor& t, const std::string& name) {
  if (t.rank() != 2) {
    return invalid_argument(name + ": expected a 2-D weight, got " + t.describe());
  }
  if (t.dtype() != DType::kBF16 && t.dtype() != DType::kF16 && t.dtype() != DType::kF32) {
    return invalid_argument(name + ": dtype " + std::string(dtype_name(t.dtype())) +
                            " is not a float weight type (BF16, F16, F32)");
  }
  return Status::ok();
}

void copy_as_bf16(const Tensor& t, uint16_t* out) {
  const int64_t n = t.numel();
  if (t.dtype() == DType::kBF16) {
    std::memcpy(out, t.data(), static_cast<size_t>(n) * 2);
  } else if (t.dtype() == DType::kF16) {
    const auto* p = t.data_as<uint16_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(fp16_to_float(p[i]));
  } else {
    const auto* p = t.data_as<float>();
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(p[i]);
  }
}

}  // namespace

Result<Tensor> stack_rows_bf16(const std::vector<Tensor>& parts, const std::string& name) {
  if (parts.empty()) return invalid_argument(name + ": no weight parts");
  int64_t rows = 0;
  const int64_t cols = parts[0].rank() == 2 ? parts[0].dim(1) : -1;
  for (const Tensor& p : parts) {
    MX_RETURN_IF_ERROR(check_2d(p, name));
    if (p.dim(1) != cols) {
      return invalid_argument(name + ": parts disagree on the input width (" + p.describe() +
                              " vs " + std::to_string(cols) + " columns)");
    }
    rows += p.dim(0);
  }
  if (parts.size() == 1 && parts[0].dtype() == DType::kBF16 && parts[0].is_contiguous()) {
    return parts[0];  // used as stored: a view of the mapped file
  }
  Tensor out = Tensor::empty(DType::kBF16, {rows, cols});
  auto* dst = out.mutable_data_as<uint16_t>();
  for (const Tensor& p : parts) {
    copy_as_bf16(p.is_contiguous() ? p : p.contiguous_copy(), dst);
    dst += p.numel();
  }
  return out;
}

Result<std::unique_ptr<Linear>> make_bf16_linear(const std::vector<Tensor>& parts,
                                                 const std::string& name) {
  MX_ASSIGN_OR_RETURN(Tensor w, stack_rows_bf16(parts, name));
  return std::unique_ptr<Linear>(new Bf16Linear(w));
}

Result<std::unique_ptr<ExpertBank>> make_bf16_expert_bank(const std::vector<Tensor>& gate,
                                                          const std::vector<Tensor>& up,
                                                          const std::vector<Tensor>& down,
                                                          const std::string& name) {
  const size_t e = gate.size();
  if (e == 0 || up.size() != e || down.size() != e) {
    return invalid_argument(name + ": expert tensor counts differ");
  }
  return make_bf16_expert_bank(
      static_cast<int64_t>(e),
      [&](int64_t x) -> Result<std::array<Tensor, 3>> {
        const auto i = static_cast<size_t>(x);
        return std::array<Tensor, 3>{gate[i], up[i], down[i]};
      },
      name);
}

Result<std::unique_ptr<ExpertBank>> make_bf16_expert_bank(int64_t experts,
                                                          const Bf16ExpertSource& next,
                                                          const std::string& name) {
  if (experts < 1) return invalid_argument(name + ": no experts");
  std::unique_ptr<Bf16ExpertBank> bank;
  int64_t inter = 0, hidden = 0;
  std::vector<uint16_t> w13, w2;  // one expert's weights as BF16
  for (int64_t x = 0; x < experts; ++x) {
    MX_ASSIGN_OR_RETURN(auto w, next(x));
    const Tensor &gate = w[0], &up = w[1], &down = w[2];
    const std::string en = name + ".experts." + std::to_string(x);
    for (const Tensor* t : {&gate, &up, &down}) MX_RETURN_IF_ERROR(check_2d(*t, en));
    if (x == 0) {
      inter = gate.dim(0);
      hidden = gate.dim(1);
      bank = std::make_unique<Bf16ExpertBank>(experts, hidden, inter);
      w13.resize(static_cast<size_t>(2 * inter * hidden));
      w2.resize(static_cast<size_t>(hidden * inter));
    }
    if (gate.shape() != Shape{inter, hidden} || up.shape() != Shape{inter, hidden} ||
        down.shape() != Shape{hidden, inter}) {
      return invalid_argument(en + ": expert shapes " + gate.describe() + ", " + up.describe() +
                              ", " + down.describe() + " differ from expert 0");
    }
    copy_as_bf16(gate, w13.data());
    copy_as_bf16(up, w13.data() + inter * hidden);
    copy_as_bf16(down, w2.data());
    bank->add(x, w13.data(), w2.data());
  }
  bank->done_adding();
  return std::unique_ptr<ExpertBank>(std::move(bank));
}

}  // namespace mx
