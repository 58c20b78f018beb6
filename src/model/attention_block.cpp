// Attention of one layer over the batch: q/k/v projection, per-head q/k RMSNorm, NeoX RoPE,
// the new keys and values into their paged blocks, causal grouped-query attention, o_proj.
#include <cmath>
#include <cstring>

#include "formats/half.h"
#include "kernels/ops.h"
#include "model/blocks.h"

namespace mx {

void attention_forward(const AttentionBlock& attn, int64_t li, ForwardContext& ctx, float* h) {
  const ModelConfig& c = ctx.config;
  const std::vector<SeqSlice>& seqs = ctx.seqs;
  const std::vector<int64_t>& row_seq = ctx.row_seq;
  const std::vector<int64_t>& row_pos = ctx.row_pos;
  const float* rope = ctx.rope;
  PagedKv& kv = ctx.kv;
  ForwardProfile* prof = ctx.profile;
  const int64_t d = c.head_dim, nq = c.num_heads, nkv = c.num_kv_heads;
  // With an output gate each query head is [query | gate].
  const int64_t qw = (attn.output_gate ? 2 : 1) * nq * d, qkv_w = qw + 2 * nkv * d;
  const int64_t rot = c.rotary_dim;
  const int64_t n = static_cast<int64_t>(row_seq.size());
  // A block holds each KV head's slots together ([kv_head][slot][head_dim]): one (row, KV head)
  // item of attention reads whole contiguous runs rather than a slice of every cached row.
  const int64_t bs = kv.block_size(), head_block = bs * d;
  std::vector<float> qkv(static_cast<size_t>(n * qkv_w));
  PhaseTimer t_qkv(prof, Phase::kQkv);
  attn.qkv->forward(h, n, qkv.data(), ctx.pool);
  t_qkv.stop();
  // Queries where the attention kernel reads them: a group's heads contiguous.
  std::vector<float> qbuf, gate;
  float* qbase = qkv.data();
  int64_t q_ld = qkv_w;
  if (attn.output_gate) {
    qbuf.resize(static_cast<size_t>(n * nq * d));
    gate.resize(qbuf.size());
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t hd = 0; hd < nq; ++hd) {
        const float* src = qkv.data() + t * qkv_w + hd * 2 * d;
        std::memcpy(&qbuf[static_cast<size_t>((t * nq + hd) * d)], src, sizeof(float) * d);
        std::memcpy(&gate[static_cast<size_t>((t * nq + hd) * d)], src + d, sizeof(float) * d);
      }
    }
    qbase = qbuf.data();
    q_ld = nq * d;
  }
  PhaseTimer t_attn(prof, Phase::kAttention);
  const auto* qn = attn.q_norm.data_as<float>();
  const auto* kn = attn.k_norm.data_as<float>();
  // q/k norms, RoPE, and the new keys and values into their blocks: all rows first, so that
  // rows of one prefill chunk see each other's keys.
  const int64_t half = rot / 2;
  const bool bf16_kv = kv.dtype() == KvDtype::kBF16;
  for (int64_t t = 0; t < n; ++t) {
    float* row = qkv.data() + t * qkv_w;
    const int64_t pos = row_pos[t];
    const float* cos = rope + t * rot;
    const float* sin = cos + half;
    const SeqSlice& sq = seqs[static_cast<size_t>(row_seq[t])];
    float* qrow = qbase + t * q_ld;
    for (int64_t hd = 0; hd < nq; ++hd) {
      rms_norm(qrow + hd * d, qn, d, c.rms_norm_eps, qrow + hd * d);
      rope_neox_cs(qrow + hd * d, rot, cos, sin);
    }
    // The row's keys and values into their slot of each KV head's part of the block.
    const int32_t block = sq.blocks[pos / bs];
    for (int64_t hd = 0; hd < nkv; ++hd) {
      float* kr = row + qw + hd * d;
      rms_norm(kr, kn, d, c.rms_norm_eps, kr);
      rope_neox_cs(kr, rot, cos, sin);
      const int64_t at = hd * head_block + (pos % bs) * d;
      const float* vr = row + qw + (nkv + hd) * d;
      if (bf16_kv) {
        uint16_t* k = kv.k_bf16(li, block) + at;
        uint16_t* v = kv.v_bf16(li, block) + at;
        for (int64_t j = 0; j < d; ++j) {
          k[j] = float_to_bf16(kr[j]);
          v[j] = float_to_bf16(vr[j]);
        }
      } else {
        std::memcpy(kv.k(li, block) + at, kr, static_cast<size_t>(d) * sizeof(float));
        std::memcpy(kv.v(li, block) + at, vr, static_cast<size_t>(d) * sizeof(float));
      }
    }
  }
  // Causal attention: the token at position p sees positions 0 .. p of its own sequence.
  std::vector<float> out(static_cast<size_t>(n * nq * d));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t group = nq / nkv;
  // One item per (row, KV head): the group's query heads read each key and value row once.
  ctx.pool->parallel_for(n * nkv, [&](int64_t b, int64_t e, int) {
    std::vector<float> scores;
    std::vector<const float*> kb, vb;
    std::vector<const uint16_t*> kb16, vb16;
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t t = idx / nkv, kvh = idx % nkv;
      const int64_t len = row_pos[t] + 1;
      const SeqSlice& sq = seqs[static_cast<size_t>(row_seq[t])];
      const int64_t nblk = (len + bs - 1) / bs;
      scores.resize(static_cast<size_t>(group * len));
      const int64_t h0 = kvh * group;
      const float* q = qbase + t * q_ld + h0 * d;
      float* o = out.data() + (t * nq + h0) * d;
      if (bf16_kv) {
        kb16.resize(static_cast<size_t>(nblk));
        vb16.resize(static_cast<size_t>(nblk));
        for (int64_t j = 0; j < nblk; ++j) {
          kb16[j] = kv.k_bf16(li, sq.blocks[j]) + kvh * head_block;
          vb16[j] = kv.v_bf16(li, sq.blocks[j]) + kvh * head_block;
        }
        attention_group_paged_bf16(q, group, kb16.data(), vb16.data(), bs, len, d, d, scale,
                                   scores.data(), o);
      } else {
        kb.resize(static_cast<size_t>(nblk));
        vb.resize(static_cast<size_t>(nblk));
        for (int64_t j = 0; j < nblk; ++j) {
          kb[j] = kv.k(li, sq.blocks[j]) + kvh * head_block;
          vb[j] = kv.v(li, sq.blocks[j]) + kvh * head_block;
        }
        attention_group_paged(q, group, kb.data(), vb.data(), bs, len, d, d, scale, scores.data(),
                              o);
      }
    }
  });
  if (attn.output_gate) {
    for (size_t i = 0; i < out.size(); ++i) out[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
  }
  t_attn.stop();
  PhaseTimer t_o(prof, Phase::kOProj);
  attn.o->forward(out.data(), n, h, ctx.pool);
}

}  // namespace mx
