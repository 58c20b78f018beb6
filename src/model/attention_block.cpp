// Attention of one layer over the batch: q/k/v projection, per-head q/k RMSNorm, NeoX RoPE,
// the new keys and values into their paged blocks, causal grouped-query attention, o_proj.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>

#include "kernels/ops.h"
#include "model/blocks.h"

namespace mx {
namespace {

// Where one pass finds each row's queries, keys and values.
struct QkvLayout {
  float* qkv;     // [n, qkv_w]: queries (or query|gate per head), then keys, then values
  int64_t qkv_w;  // floats per row of qkv
  int64_t qw;     // floats of queries (and gates) per row
  float* q;       // each row's queries, heads contiguous: q + t * q_ld + head * d
  int64_t q_ld;
  int64_t d, nq, nkv, rot;
};

// With an output gate each query head is [query | gate]: the queries move to a slot of their
// own so that a group's heads are contiguous for the attention kernel, the gates to `gate`.
void split_gated_queries(QkvLayout* l, int64_t n, Workspace& ws, float** gate) {
  const int64_t d = l->d, nq = l->nq;
  float* q = ws.floats(kWsGatedQueries, n * nq * d);
  float* g = ws.floats(kWsGates, n * nq * d);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t hd = 0; hd < nq; ++hd) {
      const float* src = l->qkv + t * l->qkv_w + hd * 2 * d;
      std::memcpy(q + (t * nq + hd) * d, src, sizeof(float) * static_cast<size_t>(d));
      std::memcpy(g + (t * nq + hd) * d, src + d, sizeof(float) * static_cast<size_t>(d));
    }
  }
  l->q = q;
  l->q_ld = nq * d;
  *gate = g;
}

// Row t's q/k norms and RoPE, and its new key and value into their block.
void store_row(const AttentionBlock& attn, int64_t li, const ForwardContext& ctx,
               const QkvLayout& l, KvStore& store, int64_t t) {
  const int64_t d = l.d, rot = l.rot, bs = ctx.kv.block_size();
  const double eps = ctx.config.rms_norm_eps;
  const auto* qn = attn.q_norm.data_as<float>();
  const auto* kn = attn.k_norm.data_as<float>();
  float* row = l.qkv + t * l.qkv_w;
  const int64_t pos = ctx.row_pos[static_cast<size_t>(t)];
  const float* cos = ctx.rope + t * rot;
  const float* sin = cos + rot / 2;
  const SeqSlice& sq = ctx.seqs[static_cast<size_t>(ctx.row_seq[static_cast<size_t>(t)])];
  float* qrow = l.q + t * l.q_ld;
  for (int64_t hd = 0; hd < l.nq; ++hd) {
    rms_norm(qrow + hd * d, qn, d, eps, qrow + hd * d);
    rope_neox_cs(qrow + hd * d, rot, cos, sin);
  }
  const int32_t block = sq.blocks[pos / bs];
  for (int64_t hd = 0; hd < l.nkv; ++hd) {
    float* kr = row + l.qw + hd * d;
    rms_norm(kr, kn, d, eps, kr);
    rope_neox_cs(kr, rot, cos, sin);
    store.write(li, block, pos % bs, hd, kr, row + l.qw + (l.nkv + hd) * d);
  }
}

// All rows first, so that rows of one prefill chunk see each other's keys. A block holds each
// KV head's slots together ([kv_head][slot][head_dim]).
void store_keys_values(const AttentionBlock& attn, int64_t li, ForwardContext& ctx,
                       const QkvLayout& l) {
  KvStore& store = ctx.kv.keys_values();
  const auto rows = [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) store_row(attn, li, ctx, l, store, t);
  };
  for_ranges(ctx.exec.pool(), ctx.rows, rows, kParallelRows);
}

// Rows [begin, end) of the batch that one attention call takes: consecutive positions of one
// sequence, at most kAttentionMaxRows, and fewer at long contexts, where each row's scores
// (group * position floats) would make the call's scratch outgrow kScratchFloats.
struct RowRun {
  int64_t begin, end;
};

constexpr int64_t kScratchFloats = int64_t{1} << 21;

// The runs in ctx's slot kWsRowRuns, in row order.
std::span<const RowRun> row_runs(ForwardContext& ctx, int64_t group) {
  RowRun* runs = ctx.exec.workspace().get<RowRun>(kWsRowRuns, ctx.rows);
  size_t count = 0;
  for (int64_t t = 0; t < ctx.rows; ++t) {
    const auto i = static_cast<size_t>(t);
    if (count > 0) {
      RowRun& r = runs[count - 1];
      const auto last = static_cast<size_t>(r.end - 1);
      const int64_t rows = r.end - r.begin + 1;
      if (rows <= kAttentionMaxRows && rows * group * (ctx.row_pos[i] + 1) <= kScratchFloats &&
          ctx.row_seq[i] == ctx.row_seq[last] && ctx.row_pos[i] == ctx.row_pos[last] + 1) {
        ++r.end;
        continue;
      }
    }
    runs[count++] = {t, t + 1};
  }
  return {runs, count};
}

// Causal attention: the token at position p sees positions 0 .. p of its own sequence. One
// item per (run of rows, KV head): the run's rows and the group's query heads share each read
// of a key and value row.
void attend(int64_t li, ForwardContext& ctx, const QkvLayout& l, float* out) {
  const int64_t d = l.d, nq = l.nq, nkv = l.nkv, group = nq / nkv;
  const int64_t bs = ctx.kv.block_size();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  KvStore& store = ctx.kv.keys_values();
  const std::span<const RowRun> runs = row_runs(ctx, group);
  const auto n_items = static_cast<int64_t>(runs.size()) * nkv;
  // Scratch and block tables in steps of the context's length (it grows by a token a step),
  // reserved in every thread's arena for the largest run: a prefill's layers then neither map
  // nor fault in a fresh megabyte per call, and decode steps do not follow the length.
  int64_t scratch_floats = 0, tables = 0;
  for (const RowRun& run : runs) {
    const int64_t rows = run.end - run.begin;
    const int64_t max_len = ctx.row_pos[static_cast<size_t>(run.begin)] + rows;
    scratch_floats = std::max(scratch_floats,
                              attention_scratch_floats(rows, group, workspace_steps(max_len), d));
    tables = std::max(tables, workspace_steps((max_len + bs - 1) / bs));
  }
  ctx.exec.reserve_arenas<float>(kArenaAttention, scratch_floats);
  // The block pointers KvStore::attend lays out: keys, values and two tables of scales.
  ctx.exec.reserve_arenas<const void*>(kArenaKeyBlocks, 4 * tables);
  ctx.exec.pool()->parallel_for(n_items, [&](int64_t b, int64_t e, int thread) {
    Workspace& arena = ctx.exec.arena(thread);
    for (int64_t idx = b; idx < e; ++idx) {
      const RowRun& run = runs[static_cast<size_t>(idx / nkv)];
      const int64_t kvh = idx % nkv, rows = run.end - run.begin;
      const int64_t len0 = ctx.row_pos[static_cast<size_t>(run.begin)] + 1;
      const int64_t max_len = len0 + rows - 1, nblk = (max_len + bs - 1) / bs;
      const SeqSlice& sq =
          ctx.seqs[static_cast<size_t>(ctx.row_seq[static_cast<size_t>(run.begin)])];
      float* scratch = arena.floats(kArenaAttention, scratch_floats);
      const int64_t h0 = kvh * group;
      const AttentionRows a{l.q + run.begin * l.q_ld + h0 * d,
                            l.q_ld,
                            out + (run.begin * nq + h0) * d,
                            nq * d,
                            rows,
                            group,
                            len0,
                            bs,
                            d,
                            d,
                            scale,
                            scratch};
      store.attend(li, a, sq.blocks, nblk, kvh,
                   arena.get<const void*>(kArenaKeyBlocks, 4 * tables));
    }
  });
}

}  // namespace

void attention_forward(const AttentionBlock& attn, int64_t li, ForwardContext& ctx, float* h) {
  const ModelConfig& c = ctx.config;
  const int64_t d = c.head_dim, nq = c.num_heads, nkv = c.num_kv_heads, n = ctx.rows;
  const int64_t qw = (attn.output_gate ? 2 : 1) * nq * d, qkv_w = qw + 2 * nkv * d;
  float* qkv = ctx.exec.workspace().floats(kWsQkv, n * qkv_w);
  PhaseTimer t_qkv(ctx.profile, Phase::kQkv);
  attn.qkv->forward(h, n, qkv, ctx.exec);
  t_qkv.stop();
  QkvLayout l{qkv, qkv_w, qw, qkv, qkv_w, d, nq, nkv, c.rotary_dim};
  float* gate = nullptr;
  if (attn.output_gate) split_gated_queries(&l, n, ctx.exec.workspace(), &gate);
  PhaseTimer t_attn(ctx.profile, Phase::kAttention);
  store_keys_values(attn, li, ctx, l);
  float* out = ctx.exec.workspace().floats(kWsAttention, n * nq * d);
  attend(li, ctx, l, out);
  if (attn.output_gate) sigmoid_gate(gate, n * nq * d, out);
  t_attn.stop();
  PhaseTimer t_o(ctx.profile, Phase::kOProj);
  attn.o->forward(out, n, h, ctx.exec);
}

}  // namespace mx
