// One MoE layer over the batch: FP32 router softmax and top-k, dispatch with the activation
// quantization the expert kernel declares fused in, the expert bank, the weighted combine.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"
#include "model/blocks.h"

namespace mx {
namespace {

// x += sigmoid(shared_gate(h)) * shared(h), per token.
void shared_expert_forward(const MoeBlock& m, ForwardContext& ctx, const float* h, float* x) {
  PhaseTimer t(ctx.profile, Phase::kSharedExpert);
  const int64_t n = ctx.rows, hid = ctx.config.hidden_size;
  std::vector<float> out(h, h + n * hid), gate(static_cast<size_t>(n));
  m.shared_gate->forward(h, n, gate.data(), ctx.pool);
  dense_mlp_apply(*m.shared, ctx, out.data());
  for (int64_t r = 0; r < n; ++r) {
    const float g = 1.0f / (1.0f + std::exp(-gate[static_cast<size_t>(r)]));
    for (int64_t d = 0; d < hid; ++d) x[r * hid + d] += g * out[static_cast<size_t>(r * hid + d)];
  }
}

}  // namespace

void moe_forward(const MoeBlock& m, int64_t li, ForwardContext& ctx, const float* h, float* x) {
  const int64_t n = ctx.rows;
  const int64_t ne = m.experts->num_experts(), hid = ctx.config.hidden_size, k = m.top_k;
  ForwardProfile* prof = ctx.profile;
  std::vector<float> probs(static_cast<size_t>(n * ne));
  PhaseTimer t_router(prof, Phase::kRouter);
  m.router->forward(h, n, probs.data(), ctx.pool);
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  std::vector<float> wts(static_cast<size_t>(n * k));
  std::vector<int32_t> order(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t) {
    float* p = probs.data() + t * ne;
    softmax(p, ne);
    std::iota(order.begin(), order.end(), 0);
    // Highest probability first; ties to the lower expert id.
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      wts[t * k + j] = m.norm_topk_prob ? p[order[j]] / sum : p[order[j]];
    }
  }
  t_router.stop();
  if (ctx.router_trace) ctx.router_trace->push_back({li, ids, wts});
  PhaseTimer t_dispatch(prof, Phase::kDispatch);
  // Dispatch: rows sorted by expert, written straight into the format the expert kernel
  // declares. Each token row is quantized once, into its first slot, and copied to the rest:
  // the quantization is part of the permutation, not a pass of its own.
  std::vector<int64_t> offsets(static_cast<size_t>(ne + 1), 0);
  for (int32_t e : ids) ++offsets[static_cast<size_t>(e) + 1];
  for (int64_t e = 0; e < ne; ++e) offsets[e + 1] += offsets[e];
  std::vector<int64_t> slot(static_cast<size_t>(n * k));
  {
    std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
    for (int64_t i = 0; i < n * k; ++i)
      slot[static_cast<size_t>(i)] = fill[static_cast<size_t>(ids[static_cast<size_t>(i)])]++;
  }
  const Scheme decl =
      ctx.fused_dispatch ? m.experts->input_scheme(DispatchMode::kLocal) : Scheme::kBf16;
  ActRows rows;
  act_rows_init(decl, hid, ctx.scale_rule, &rows);
  rows.resize(n * k);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t first = slot[static_cast<size_t>(t * k)];
    act_rows_quantize(h + t * hid, first, ctx.scale_rule, &rows);
    for (int64_t j = 1; j < k; ++j)
      act_rows_copy(rows, first, &rows, slot[static_cast<size_t>(t * k + j)]);
  }
  std::vector<float> outs(static_cast<size_t>(n * k * hid));
  t_dispatch.stop();
  ExpertTimes et;
  m.experts->run(rows, offsets.data(), outs.data(), ctx.pool, prof ? &et : nullptr);
  if (prof) {
    prof->add(Phase::kGmm1, et.gmm1);
    prof->add(Phase::kGmm2, et.gmm2);
  }
  PhaseTimer t_combine(prof, Phase::kCombine);
  // Combine: the weighted un-permute back to token order.
  for (int64_t t = 0; t < n; ++t) {
    float* dst = x + t * hid;
    for (int64_t j = 0; j < k; ++j) {
      const float wj = wts[static_cast<size_t>(t * k + j)];
      const float* o = outs.data() + slot[static_cast<size_t>(t * k + j)] * hid;
      for (int64_t d = 0; d < hid; ++d) dst[d] += wj * o[d];
    }
  }
  t_combine.stop();
  if (m.shared) shared_expert_forward(m, ctx, h, x);
}

}  // namespace mx
