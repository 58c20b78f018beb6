// Data-parallel attention beside expert parallelism (--enable-dp-attention): every rank is
// given the whole step and runs only the slices whose dp_rank is its own, with its own cache
// blocks and recurrent slots; MoE layers exchange each rank's own rows with the experts'
// owners (MoeArgs::own_rows), and a rank without slices still joins each of their collectives.
// The logit rows then meet the lm_head: split by vocabulary over the ranks (every rank's normed
// rows to every rank first), or whole on each rank for its own rows; rank 0 receives the
// logits in slice order.
#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/ops.h"
#include "model/blocks.h"

namespace mx {
namespace {

int64_t logit_count(const SeqSlice& s) {
  switch (s.logits) {
    case SeqSlice::Logits::kAll:
      return s.count;
    case SeqSlice::Logits::kLast:
      return 1;
    case SeqSlice::Logits::kNone:
      break;
  }
  return 0;
}

void check_collective(Comm& comm, const Status& st, const char* what) {
  if (!st.is_ok()) comm.abort(std::string(what) + " failed: " + st.to_string());
}

}  // namespace

Status DecoderModel::forward_dp(std::span<const SeqSlice> seqs, PagedKv& kv, float* logits,
                                float* hidden) {
  Comm& comm = *dp_comm;
  const int me = comm.rank(), ranks = comm.size();
  MX_CHECK(hidden == nullptr && hidden_out_ == nullptr && !mtp_input);  // forward_batch refused
  bool has_prefill = false;
  dp_rows_.assign(static_cast<size_t>(ranks), 0);
  dp_logit_rows_.assign(static_cast<size_t>(ranks), 0);
  own_seqs_.clear();
  for (const SeqSlice& s : seqs) {
    if (s.dp_rank < 0 || s.dp_rank >= ranks) {
      return invalid_argument("forward: data-parallel rank " + std::to_string(s.dp_rank) +
                              " outside the " + std::to_string(ranks) + " ranks");
    }
    has_prefill = has_prefill || s.count > 1;
    dp_rows_[static_cast<size_t>(s.dp_rank)] += s.count;
    dp_logit_rows_[static_cast<size_t>(s.dp_rank)] += logit_count(s);
    if (s.dp_rank == me) own_seqs_.push_back(s);
  }
  const int64_t most = *std::max_element(dp_rows_.begin(), dp_rows_.end());
  const int64_t hid = config_.hidden_size;
  const int64_t own_logits = dp_logit_rows_[static_cast<size_t>(me)];
  float* mine = exec_->workspace().floats(kWsDpHidden, std::max<int64_t>(1, own_logits) * hid);
  if (own_seqs_.empty()) {
    idle_layers(has_prefill, most);
  } else {
    MX_RETURN_IF_ERROR(plan_rows(own_seqs_, kv));
    const float* x = run_layers(own_seqs_, kv, has_prefill, most);
    for (size_t i = 0; i < logit_rows_.size(); ++i) {
      rms_norm(x + logit_rows_[i] * hid, final_norm.data_as<float>(), hid, config_.rms_norm_eps,
               mine + static_cast<int64_t>(i) * hid);
    }
  }
  PhaseTimer t_head(profile_, Phase::kLmHead);
  dp_logits(seqs, mine, logits);
  return Status::ok();
}

void DecoderModel::idle_layers(bool has_prefill, int64_t most_rows) {
  const int64_t hid = config_.hidden_size;
  const uint64_t step = steps_++;
  if (profile_) ++profile_->forwards;
  for (const DecoderLayer& l : layers) {
    if (!l.moe) continue;
    const MoeBlock& m = *l.moe;
    // No rows: the pointers are never read, but stay valid.
    float* none = exec_->workspace().floats(kWsDpIdle, hid + m.num_experts + m.top_k);
    int32_t ids[1] = {0};
    MoeArgs a;
    a.experts = m.experts.get();
    a.first_expert = m.first_expert;
    a.num_experts = m.num_experts;
    a.top_k = m.top_k;
    a.norm_topk_prob = m.norm_topk_prob;
    a.probs = none;
    a.h = none;
    a.x = none;
    a.rows = 0;
    a.hidden = hid;
    a.has_prefill = has_prefill;
    a.own_rows = true;
    a.most_rows = most_rows;
    a.step = step;
    // Timed like a busy rank's layers: their barriers before each collective must meet.
    MoeTimes times;
    a.times = profile_ != nullptr ? &times : nullptr;
    a.rule = scale_rule_;
    a.fused = fused_dispatch_;
    a.exec = exec_.get();
    a.ids = ids;
    a.wts = none;
    dispatcher_->run(a);
  }
}

void DecoderModel::dp_logits(std::span<const SeqSlice> seqs, const float* mine, float* logits) {
  Comm& comm = *dp_comm;
  const int me = comm.rank();
  const int64_t hid = config_.hidden_size, vocab = config_.vocab_size;
  int64_t total = 0;
  for (int64_t c : dp_logit_rows_) total += c;
  if (total == 0) return;
  Workspace& ws = exec_->workspace();
  const auto n = static_cast<size_t>(comm.size());
  dp_counts_.assign(4 * n, 0);
  int64_t *sb = dp_counts_.data(), *so = sb + n, *rb = so + n, *ro = rb + n;
  const int64_t own = dp_logit_rows_[static_cast<size_t>(me)];
  // Rows by rank, then in slice order: slice i's rows are the next ones of its rank's block.
  auto in_slice_order = [&](const float* by_rank, int64_t width, float* out) {
    std::vector<int64_t>& at = dp_next_;  // each rank's next row
    at.assign(n, 0);
    for (size_t q = 1; q < n; ++q) at[q] = at[q - 1] + dp_logit_rows_[q - 1];
    int64_t g = 0;
    for (const SeqSlice& s : seqs) {
      const int64_t c = logit_count(s);
      int64_t& from = at[static_cast<size_t>(s.dp_rank)];
      std::memcpy(out + g * width, by_rank + from * width,
                  static_cast<size_t>(c * width) * sizeof(float));
      from += c;
      g += c;
    }
  };
  if (!dp_lm_head) {
    // The whole head on every rank: its own rows' logits go to rank 0.
    float* own_logits = ws.floats(kWsHeadShare, std::max<int64_t>(1, own) * vocab);
    if (own > 0) head().forward(mine, own, own_logits, *exec_);
    sb[0] = own * vocab * static_cast<int64_t>(sizeof(float));
    float* all = nullptr;
    if (me == 0) {
      all = ws.floats(kWsHeadGather, total * vocab);
      int64_t off = 0;
      for (size_t q = 0; q < n; off += dp_logit_rows_[q++]) {
        rb[q] = dp_logit_rows_[q] * vocab * static_cast<int64_t>(sizeof(float));
        ro[q] = off * vocab * static_cast<int64_t>(sizeof(float));
      }
    }
    check_collective(comm, comm.all_to_all_v(own_logits, sb, so, all, rb, ro),
                     "gathering the logits");
    if (me == 0) in_slice_order(all, vocab, logits);
    return;
  }
  // Split by vocabulary: every rank's rows to every rank, each rank its share of the logits.
  float* by_rank = ws.floats(kWsDpGathered, total * hid);
  int64_t off = 0;
  for (size_t q = 0; q < n; off += dp_logit_rows_[q++]) {
    sb[q] = own * hid * static_cast<int64_t>(sizeof(float));
    rb[q] = dp_logit_rows_[q] * hid * static_cast<int64_t>(sizeof(float));
    ro[q] = off * hid * static_cast<int64_t>(sizeof(float));
  }
  check_collective(comm, comm.all_to_all_v(mine, sb, so, by_rank, rb, ro),
                   "gathering the rows for the lm_head");
  float* rows = ws.floats(kWsDpOrdered, total * hid);
  in_slice_order(by_rank, hid, rows);
  const int64_t share = total * (head_end - head_begin);
  float* part = ws.floats(kWsHeadShare, share);
  head().forward(rows, total, part, *exec_);
  // The rows' top-1 flags in slice order, as the rows are.
  dp_top1_.clear();
  bool any = false;
  for (const SeqSlice& s : seqs) {
    dp_top1_.insert(dp_top1_.end(), static_cast<size_t>(logit_count(s)), s.top1_logits ? 1 : 0);
    any = any || s.top1_logits;
  }
  gather_logits(part, share, total, logits, any ? dp_top1_.data() : nullptr);
}

}  // namespace mx
