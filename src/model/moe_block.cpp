// One MoE layer over the batch: the router gate, then the dispatcher (top-k, dispatch in the
// format the expert kernel declares, the experts, the weighted combine), then the shared
// expert.
#include <cmath>

#include "kernels/ops.h"
#include "model/blocks.h"

namespace mx {
namespace {

// y += sigmoid(shared_gate(h)) * shared(h), per token.
void shared_expert_forward(const MoeBlock& m, ForwardContext& ctx, const float* h, float* y) {
  PhaseTimer t(ctx.profile, Phase::kSharedExpert);
  const int64_t n = ctx.rows, hid = ctx.config.hidden_size;
  std::vector<float> out(h, h + n * hid), gate(static_cast<size_t>(n));
  m.shared_gate->forward(h, n, gate.data(), ctx.exec);
  dense_mlp_apply(*m.shared, ctx, out.data());
  for (int64_t r = 0; r < n; ++r) {
    const float g = 1.0f / (1.0f + std::exp(-gate[static_cast<size_t>(r)]));
    for (int64_t d = 0; d < hid; ++d) y[r * hid + d] += g * out[static_cast<size_t>(r * hid + d)];
  }
}

}  // namespace

void moe_forward(const MoeBlock& m, int64_t li, ForwardContext& ctx, const float* h, float* x) {
  const int64_t n = ctx.rows, ne = m.num_experts, k = m.top_k;
  ForwardProfile* prof = ctx.profile;
  std::vector<float> probs(static_cast<size_t>(n * ne));
  PhaseTimer t_router(prof, Phase::kRouter);
  m.router->forward(h, n, probs.data(), ctx.exec);
  t_router.stop();
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  std::vector<float> wts(static_cast<size_t>(n * k));
  MoeTimes times;
  MoeArgs a;
  a.experts = m.experts.get();
  a.num_experts = ne;
  a.top_k = k;
  a.norm_topk_prob = m.norm_topk_prob;
  a.probs = probs.data();
  a.h = h;
  const int64_t hid = ctx.config.hidden_size;
  float* y = ctx.exec.workspace().floats(kWsMoe, n * hid);
  a.x = y;
  a.rows = n;
  a.hidden = hid;
  a.has_prefill = ctx.has_prefill;
  a.step = ctx.step;
  a.rule = ctx.scale_rule;
  a.fused = ctx.fused_dispatch;
  a.exec = &ctx.exec;
  a.ids = ids.data();
  a.wts = wts.data();
  a.times = prof ? &times : nullptr;
  ctx.dispatcher.run(a);
  if (prof) {
    prof->add(Phase::kRouter, times.route);
    prof->add(Phase::kDispatch, times.dispatch);
    prof->add(Phase::kGmm1, times.gmm1);
    prof->add(Phase::kGmm2, times.gmm2);
    prof->add(Phase::kCombine, times.combine);
    prof->add(Phase::kEpSkew, times.skew);
    prof->add(Phase::kEpExchange, times.exchange);
  }
  if (ctx.router_trace) ctx.router_trace->push_back({li, std::move(ids), std::move(wts)});
  if (m.shared) shared_expert_forward(m, ctx, h, y);
  for (int64_t i = 0; i < n * hid; ++i) x[i] += y[i];
}

}  // namespace mx
