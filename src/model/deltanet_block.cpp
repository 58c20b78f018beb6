// Gated DeltaNet linear attention of one layer over the batch (Qwen3.5): the projections run
// over every row at once; the conv1d and the delta rule run per sequence, over its state in
// its slot of the cache (kernels/deltanet.h), chunked for prefill and token by token for
// decode; then the gated RMSNorm with z and out_proj.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/fp_env.h"
#include "core/thread_pool.h"
#include "formats/half.h"
#include "kernels/deltanet.h"
#include "model/blocks.h"

namespace mx {
namespace {

struct Dims {
  int64_t nk, nv, dk, dv, kernel, key, value, conv;  // key = nk * dk, conv = 2 key + value
  bool tiled;  // value head j reads key head j % nk (else j / (nv / nk))
};

Dims dims_of(const ModelConfig& c) {
  Dims d{c.linear_num_key_heads,
         c.linear_num_value_heads,
         c.linear_key_head_dim,
         c.linear_value_head_dim,
         c.linear_conv_kernel_dim,
         0,
         0,
         0,
         c.linear_v_heads_tiled};
  d.key = d.nk * d.dk;
  d.value = d.nv * d.dv;
  d.conv = 2 * d.key + d.value;
  return d;
}

// A float tensor of any stored float type as FP32, same shape.
Result<Tensor> as_f32(const Tensor& t, const std::string& name) {
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16) {
    return invalid_argument("tensor '" + name + "' is " + t.describe() + ", not a float tensor");
  }
  const Tensor c = t.is_contiguous() ? t : t.contiguous_copy();
  Tensor out = Tensor::empty(DType::kF32, c.shape());
  float* o = out.mutable_data_as<float>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    o[i] = c.dtype() == DType::kF32    ? c.data_as<float>()[i]
           : c.dtype() == DType::kBF16 ? bf16_to_float(c.data_as<uint16_t>()[i])
                                       : fp16_to_float(c.data_as<uint16_t>()[i]);
  }
  return out;
}

Result<Tensor> f32_param(const WeightLoader& w, const std::string& name, const Shape& shape) {
  MX_ASSIGN_OR_RETURN(Tensor t, w.get(name, shape));
  return as_f32(t, name);
}

// The conv state after each position of a verified slice: the last kernel - 1 inputs, from
// the state before the slice and the slice's own inputs (x, before the conv overwrites it).
void keep_conv_states(const Dims& d, PagedKv& kv, int64_t li, const SeqSlice& sq,
                      const float* state, const float* x, int64_t ld) {
  const int64_t hist = d.kernel - 1;
  for (int64_t i = 0; i < sq.count; ++i) {
    float* out = kv.kept_state(li, sq.slot, i);
    for (int64_t j = 0; j < hist; ++j) {
      const int64_t pos = i - hist + 1 + j;  // the input this row of the state holds
      const float* src = pos >= 0 ? x + pos * ld : state + (hist + pos) * d.conv;
      std::memcpy(out + j * d.conv, src, static_cast<size_t>(d.conv) * sizeof(float));
    }
  }
}

// One sequence's rows [r0, r0 + count) through conv, norms, gates and the delta rule.
void run_sequence(const DeltaNetBlock& dn, const Dims& d, ForwardContext& ctx, int64_t li,
                  const SeqSlice& sq, int64_t r0, float* proj, int64_t ld, const float* ba,
                  float* o) {
  const DeltaNetKernels& k = deltanet_kernels();
  const int64_t t = sq.count;
  float* conv_state = ctx.kv.conv_state(li, sq.slot);
  float* state = ctx.kv.delta_state(li, sq.slot);
  if (sq.start == 0) {
    // A sequence that starts (or restarts after preemption) has no history.
    std::memset(conv_state, 0, sizeof(float) * static_cast<size_t>((d.kernel - 1) * d.conv));
    std::memset(state, 0, sizeof(float) * static_cast<size_t>(d.nv * d.dk * d.dv));
  }
  PhaseTimer t_conv(ctx.profile, Phase::kDnConv);
  float* x = proj + r0 * ld;
  if (sq.keep_states) keep_conv_states(d, ctx.kv, li, sq, conv_state, x, ld);
  // Channels are independent: threads split them in runs of 64 (whole vectors at every
  // width), each run with the operations it has alone.
  constexpr int64_t kRun = 64;
  for_ranges(ctx.exec.pool(), (d.conv + kRun - 1) / kRun, [&](int64_t b, int64_t e, int) {
    const int64_t c0 = b * kRun, c1 = std::min(d.conv, e * kRun);
    k.conv_silu({x + c0, dn.conv_w.data_as<float>() + c0 * d.kernel, conv_state + c0, x + c0, t,
                 c1 - c0, d.kernel, ld, ld, d.conv});
  });
  k.l2_norm(x, t, d.nk, d.dk, ld, 1.0f / std::sqrt(static_cast<float>(d.dk)));
  k.l2_norm(x + d.key, t, d.nk, d.dk, ld, 1.0f);
  float* g = ctx.exec.workspace().floats(kWsDnGates, 2 * t * d.nv);
  float* beta = g + t * d.nv;
  const float* brow = ba + r0 * 2 * d.nv;
  k.decay_gate(brow + d.nv, 2 * d.nv, dn.dt_bias.data_as<float>(), dn.a_log.data_as<float>(), t,
               d.nv, g);
  for (int64_t r = 0; r < t; ++r) k.sigmoid(brow + r * 2 * d.nv, d.nv, beta + r * d.nv);
  t_conv.stop();
  PhaseTimer t_rule(ctx.profile, Phase::kDeltaRule);
  const DeltaRuleArgs a{x,  x + d.key, x + 2 * d.key, g,    beta, state, o + r0 * d.value,
                        t,  d.nk,      d.nv,          d.dk, d.dv, ld,    ld,
                        ld, d.nv,      d.value};
  const int64_t conv_floats = (d.kernel - 1) * d.conv;
  const bool chunked = t > 1 && !sq.stepwise && !sq.keep_states;
  const int64_t scratch_floats =
      chunked ? delta_rule_chunked_scratch_floats(t, d.nv, d.dk, d.dv) : 0;
  if (chunked) ctx.exec.reserve_arenas<float>(kArenaDeltaRule, scratch_floats);
  // Value heads are independent: threads split them, and every head runs the same operations
  // whatever the split. Each runs alone, reading the key head its order gives it.
  for_ranges(ctx.exec.pool(), d.nv, [&](int64_t h0, int64_t h1, int thread) {
    // With strongly negative log decays (seen on synthetic weights) the chunk's decay
    // products fall below FP32's normal range; flushing them keeps the delta rule at its
    // normal speed (prefill of the 35B-A3B shape: 4.3x on an Intel Xeon), and a term that
    // small is far below the rounding of the state it joins.
    const FlushSubnormals flush;
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t kh = d.tiled ? h % d.nk : h / (d.nv / d.nk);
      DeltaRuleArgs part = a;
      part.q += kh * d.dk;
      part.k += kh * d.dk;
      part.v += h * d.dv;
      part.g += h;
      part.beta += h;
      part.state += h * d.dk * d.dv;
      part.o += h * d.dv;
      part.nk = 1;
      part.nv = 1;
      if (sq.keep_states) {
        // One token per call, as decode steps run it, each position's state kept.
        const int64_t per_head = d.dk * d.dv;
        DeltaRuleArgs one = part;
        one.t = 1;
        for (int64_t i = 0; i < t; ++i) {
          k.delta_rule_recurrent(one);
          std::memcpy(ctx.kv.kept_state(li, sq.slot, i) + conv_floats + h * per_head, part.state,
                      static_cast<size_t>(per_head) * sizeof(float));
          one.q += part.ldq, one.k += part.ldk, one.v += part.ldv;
          one.g += part.ldg, one.beta += part.ldg, one.o += part.ldo;
        }
      } else if (t == 1 || sq.stepwise) {
        k.delta_rule_recurrent(part);
      } else {
        // A lone token after the last whole chunk runs as a call of that one token would (the
        // recurrence), so that a prompt split where chunks begin rounds as the whole prompt.
        const int64_t lone = t % kDeltaChunk == 1 ? 1 : 0;
        DeltaRuleArgs head = part;
        head.t = t - lone;
        k.delta_rule_chunked(head, ctx.exec.arena(thread).floats(kArenaDeltaRule, scratch_floats));
        if (lone != 0) {
          DeltaRuleArgs last = part;
          last.t = 1;
          last.q += (t - 1) * part.ldq, last.k += (t - 1) * part.ldk, last.v += (t - 1) * part.ldv;
          last.g += (t - 1) * part.ldg, last.beta += (t - 1) * part.ldg;
          last.o += (t - 1) * part.ldo;
          k.delta_rule_recurrent(last);
        }
      }
    }
  });
}

// What one rank holds (all of it in one process): key heads [k0, k1), and of each of them its
// value heads [v0, v1) (all r = nv / nk, or this rank's part when there are fewer key heads
// than ranks and each is held by several); `values` lists those value heads in the order the
// block reads them (value head j belongs to key head j % nk when tiled, else j / r).
struct HeadShare {
  int64_t k0, k1, v0, v1;
  Ranges values;
};

HeadShare head_share(const TpShard& tp, const Dims& d) {
  const auto [k0, k1] = tp.kv_heads(d.nk);
  const int64_t r = d.nv / d.nk;
  int64_t v0 = 0, v1 = r;
  if (d.nk < tp.size) {
    const int64_t per = tp.size / d.nk, sub = tp.rank % per;
    v0 = r * sub / per;
    v1 = r * (sub + 1) / per;
  }
  Ranges values;
  if (d.tiled) {
    for (int64_t m = v0; m < v1; ++m) values.emplace_back(m * d.nk + k0, m * d.nk + k1);
  } else {
    for (int64_t g = k0; g < k1; ++g) values.emplace_back(g * r + v0, g * r + v1);
  }
  return {k0, k1, v0, v1, values};
}

// Qwen3-Next's fused rows: per key head a group of `parts` runs ({q dk, k dk, v r dv, z r dv}
// or {b r, a r}); of each group the share takes all of q and k, and of each value part
// (`per_value` rows a value head) the rows of its value heads [v0, v1). Part by part, groups in
// order: the block's [q | k | v | z] and [b | a].
Ranges grouped_runs(const HeadShare& s, const std::vector<int64_t>& parts, int64_t per_value,
                    size_t first_value_part) {
  int64_t group = 0;
  for (int64_t n : parts) group += n;
  Ranges runs;
  int64_t offset = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const bool value = p >= first_value_part;
    const int64_t b = value ? s.v0 * per_value : 0, e = value ? s.v1 * per_value : parts[p];
    for (int64_t g = s.k0; g < s.k1; ++g) {
      runs.emplace_back(g * group + offset + b, g * group + offset + e);
    }
    offset += parts[p];
  }
  return runs;
}

// The conv channels [q | k | v] of the share.
Ranges conv_channels(const Dims& d, const HeadShare& s) {
  Ranges c = {{s.k0 * d.dk, s.k1 * d.dk}, {d.key + s.k0 * d.dk, d.key + s.k1 * d.dk}};
  for (const auto& r : scaled(s.values, d.dv, 2 * d.key)) c.push_back(r);
  return c;
}

// Rows `rows` of an FP32 tensor [n, ...], stacked in order.
Tensor take_rows(const Tensor& t, const Ranges& rows) {
  const int64_t per = t.numel() / t.dim(0);
  int64_t n = 0;
  for (const auto& [b, e] : rows) n += e - b;
  Shape shape = t.shape();
  shape[0] = n;
  Tensor out = Tensor::empty(DType::kF32, shape);
  float* dst = out.mutable_data_as<float>();
  for (const auto& [b, e] : rows) {
    std::memcpy(dst, t.data_as<float>() + b * per,
                static_cast<size_t>((e - b) * per) * sizeof(float));
    dst += (e - b) * per;
  }
  return out;
}

// Qwen3-Next's in_proj_qkvz is [nk, (q dk, k dk, v r dv, z r dv)] and in_proj_ba [nk, (b r, a
// r)] with r = nv / nk value heads per key head; the block wants [q | k | v | z] and [b | a],
// value head j under key head j / r, which is the groups' order.
Status load_projections(const WeightLoader& w, const ModelConfig& c, const Dims& d, int64_t h,
                        const HeadShare& s, const std::string& prefix, DeltaNetBlock* out) {
  const int64_t r = d.nv / d.nk;
  const std::string qkvz = prefix + ".in_proj_qkvz", ba = prefix + ".in_proj_ba";
  if (c.deltanet_fused_qkvz) {
    MX_ASSIGN_OR_RETURN(
        out->qkvz, w.linear_row_ranges(qkvz, d.conv + d.value, h,
                                       grouped_runs(s, {d.dk, d.dk, r * d.dv, r * d.dv}, d.dv, 2),
                                       qkvz, /*keep_float=*/false));
  } else {
    MX_ASSIGN_OR_RETURN(out->qkvz,
                        w.shard(w.packed_modules(prefix, "in_proj_qkvz", 2), {d.conv, d.value}, h,
                                {conv_channels(d, s), scaled(s.values, d.dv)}, {}, qkvz));
  }
  // b and a feed per-head gates: kept as stored, like the router.
  if (c.deltanet_fused_ba) {
    MX_ASSIGN_OR_RETURN(out->ba, w.linear_row_ranges(ba, 2 * d.nv, h, grouped_runs(s, {r, r}, 1, 0),
                                                     ba, /*keep_float=*/true));
  } else {
    MX_ASSIGN_OR_RETURN(out->ba, w.shard(w.packed_modules(prefix, "in_proj_ba", 2), {d.nv, d.nv}, h,
                                         {s.values, s.values}, {}, ba, /*keep_float=*/true));
  }
  return Status::ok();
}

}  // namespace

Status load_deltanet(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                     DeltaNetBlock* out) {
  const Dims d = dims_of(c);
  const int64_t h = c.hidden_size;
  if (d.kernel > kConvMaxKernel) {
    return unimplemented(prefix + ": conv1d kernel width " + std::to_string(d.kernel) +
                         " exceeds " + std::to_string(kConvMaxKernel));
  }
  const HeadShare s = head_share(w.tp(), d);
  MX_RETURN_IF_ERROR(load_projections(w, c, d, h, s, prefix, out));
  const std::string out_proj = prefix + ".out_proj";
  if (w.tp().on()) {
    std::vector<Ranges> cols;
    for (int r = 0; r < w.tp().size; ++r) {
      cols.push_back(scaled(head_share(TpShard{r, w.tp().size}, d).values, d.dv));
    }
    MX_ASSIGN_OR_RETURN(out->out, w.row_parallel(out_proj, h, d.value, cols, out_proj));
  } else {
    MX_ASSIGN_OR_RETURN(out->out, w.linear({out_proj}, {h}, d.value, out_proj));
  }
  auto conv = f32_param(w, prefix + ".conv1d.weight", {d.conv, 1, d.kernel});
  if (!conv.is_ok()) {
    return conv.status().with_context("linear_conv_kernel_dim is " + std::to_string(d.kernel));
  }
  out->conv_w = conv->reshape({d.conv, d.kernel});
  MX_ASSIGN_OR_RETURN(out->a_log, f32_param(w, prefix + ".A_log", {d.nv}));
  MX_ASSIGN_OR_RETURN(out->dt_bias, f32_param(w, prefix + ".dt_bias", {d.nv}));
  MX_ASSIGN_OR_RETURN(out->norm, f32_param(w, prefix + ".norm.weight", {d.dv}));
  if (w.tp().on()) {
    out->conv_w = take_rows(out->conv_w, conv_channels(d, s));
    out->a_log = take_rows(out->a_log, s.values);
    out->dt_bias = take_rows(out->dt_bias, s.values);
  }
  return Status::ok();
}

void deltanet_forward(const DeltaNetBlock& dn, int64_t li, ForwardContext& ctx, float* h) {
  const Dims d = dims_of(ctx.config);
  const int64_t n = ctx.rows, ld = d.conv + d.value;
  Workspace& ws = ctx.exec.workspace();
  // Every row of each is written before it is read: the projections fill proj and ba, and
  // each sequence's delta rule its rows of o.
  float* proj = ws.floats(kWsDnProj, n * ld);
  float* ba = ws.floats(kWsDnGateInputs, n * 2 * d.nv);
  float* o = ws.floats(kWsDnOut, n * d.value);
  PhaseTimer t_proj(ctx.profile, Phase::kDnProj);
  dn.qkvz->forward(h, n, proj, ctx.exec);
  dn.ba->forward(h, n, ba, ctx.exec);
  t_proj.stop();
  int64_t r0 = 0;
  for (const SeqSlice& sq : ctx.seqs) {
    run_sequence(dn, d, ctx, li, sq, r0, proj, ld, ba, o);
    r0 += sq.count;
  }
  PhaseTimer t_norm(ctx.profile, Phase::kDnNorm);
  const DeltaNetKernels& k = deltanet_kernels();
  for (int64_t r = 0; r < n; ++r) {
    float* orow = o + r * d.value;
    k.gated_rms_norm(orow, proj + r * ld + d.conv, dn.norm.data_as<float>(), d.nv, d.dv,
                     static_cast<float>(ctx.config.rms_norm_eps), orow);
  }
  t_norm.stop();
  PhaseTimer t_out(ctx.profile, Phase::kDnProj);
  dn.out->forward(o, n, h, ctx.exec);
}

}  // namespace mx
