// One MoE layer over the batch: the router gate, then the dispatcher (top-k, dispatch in the
// format the expert kernel declares, the experts, the weighted combine), then the shared
// expert.
#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "model/blocks.h"

namespace mx {
namespace {

// y += sigmoid(shared_gate(h)) * shared(h), per token.
void shared_expert_forward(const MoeBlock& m, ForwardContext& ctx, const float* h, float* y) {
  PhaseTimer t(ctx.profile, Phase::kSharedExpert);
  const int64_t n = ctx.rows, hid = ctx.config.hidden_size;
  Workspace& ws = ctx.exec.workspace();
  float* out = ws.floats(kWsSharedExpert, n * hid);
  float* gate = ws.floats(kWsSharedGate, n);
  std::memcpy(out, h, static_cast<size_t>(n * hid) * sizeof(float));
  m.shared_gate->forward(h, n, gate, ctx.exec);
  dense_mlp_apply(*m.shared, ctx, out);
  for (int64_t r = 0; r < n; ++r) {
    const float g = 1.0f / (1.0f + std::exp(-gate[r]));
    for (int64_t d = 0; d < hid; ++d) y[r * hid + d] += g * out[r * hid + d];
  }
}

}  // namespace

void moe_forward(const MoeBlock& m, int64_t li, ForwardContext& ctx, const float* h, float* x) {
  const int64_t n = ctx.rows, ne = m.num_experts, k = m.top_k;
  ForwardProfile* prof = ctx.profile;
  Workspace& ws = ctx.exec.workspace();
  float* probs = ws.floats(kWsRouterLogits, n * ne);
  PhaseTimer t_router(prof, Phase::kRouter);
  m.router->forward(h, n, probs, ctx.exec);
  t_router.stop();
  int32_t* ids = ws.get<int32_t>(kWsRoutedExperts, n * k);
  float* wts = ws.floats(kWsRoutedWeights, n * k);
  MoeTimes times;
  MoeArgs a;
  a.experts = m.experts.get();
  a.first_expert = m.first_expert;
  a.num_experts = ne;
  a.top_k = k;
  a.norm_topk_prob = m.norm_topk_prob;
  a.probs = probs;
  a.h = h;
  const int64_t hid = ctx.config.hidden_size;
  float* y = ws.floats(kWsMoe, n * hid);
  a.x = y;
  a.rows = n;
  a.hidden = hid;
  a.has_prefill = ctx.has_prefill;
  a.own_rows = ctx.own_rows;
  a.most_rows = ctx.most_rows;
  a.step = ctx.step;
  a.rule = ctx.scale_rule;
  a.fused = ctx.fused_dispatch;
  a.exec = &ctx.exec;
  a.ids = ids;
  a.wts = wts;
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
  if (ctx.router_trace) {
    ctx.router_trace->push_back({li, {ids, ids + n * k}, {wts, wts + n * k}});
  }
  if (m.shared) shared_expert_forward(m, ctx, h, y);
  tp_all_reduce(ctx, y);
  add_rows(ctx, y, x);
}

}  // namespace mx
