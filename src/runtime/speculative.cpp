#include "runtime/speculative.h"

#include <algorithm>
#include <cmath>

#include "runtime/sampler.h"

namespace mx {

Result<SpecAlgorithm> parse_spec_algorithm(std::string_view name) {
  if (name.empty() || name == "none") return SpecAlgorithm::kNone;
  if (name == "ngram") return SpecAlgorithm::kNgram;
  if (name == "mtp" || name == "nextn" || name == "NEXTN") return SpecAlgorithm::kMtp;
  // vLLM's "draft_model", SGLang's STANDALONE.
  if (name == "draft" || name == "draft_model" || name == "standalone" || name == "STANDALONE") {
    return SpecAlgorithm::kDraft;
  }
  if (name == "eagle" || name == "dflash" || name == "DFLASH" || name == "EAGLE") {
    return unimplemented("--speculative-algorithm " + std::string(name) +
                         " is not available yet; use ngram, mtp or draft");
  }
  return invalid_argument("--speculative-algorithm: unknown algorithm '" + std::string(name) +
                          "' (choose none, ngram, mtp or draft)");
}

const char* spec_algorithm_name(SpecAlgorithm a) {
  switch (a) {
    case SpecAlgorithm::kNgram:
      return "ngram";
    case SpecAlgorithm::kMtp:
      return "mtp";
    case SpecAlgorithm::kDraft:
      return "draft";
    case SpecAlgorithm::kNone:
      break;
  }
  return "none";
}

Status NgramDrafter::propose(std::span<const int32_t> history, int max, std::vector<int32_t>* out) {
  out->clear();
  const auto len = static_cast<int64_t>(history.size());
  if (max <= 0) return Status::ok();
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    const int32_t* suffix = history.data() + len - n;
    // The most recent earlier occurrence: text being repeated is usually the latest copy.
    for (int64_t p = len - n - 1; p >= 0; --p) {
      if (!std::equal(suffix, suffix + n, history.data() + p)) continue;
      const int64_t from = p + n, to = std::min(len, from + max);
      out->assign(history.begin() + from, history.begin() + to);
      return Status::ok();
    }
  }
  return Status::ok();
}

Status MtpDrafter::begin(int64_t capacity) {
  if (!cache_ || cache_->capacity() < capacity) {
    cache_ = std::make_unique<KvCache>(head_.config(), capacity, head_.kv_dtype());
  }
  done_ = 0;
  pending_.clear();
  return Status::ok();
}

Status MtpDrafter::observe(int64_t start, int64_t count, const float* hidden) {
  const int64_t hid = head_.config().hidden_size;
  const int64_t have = done_ + static_cast<int64_t>(pending_.size()) / hid;
  if (start > have || start < done_) {
    return invalid_argument("MTP drafter: positions observed out of order");
  }
  pending_.resize(static_cast<size_t>((start - done_) * hid));
  pending_.insert(pending_.end(), hidden, hidden + count * hid);
  return Status::ok();
}

Status MtpDrafter::propose(std::span<const int32_t> history, int max, std::vector<int32_t>* out) {
  out->clear();
  const int64_t hid = head_.config().hidden_size, vocab = head_.config().vocab_size;
  const auto len = static_cast<int64_t>(history.size());
  const int64_t rows = static_cast<int64_t>(pending_.size()) / hid;
  // Row t needs token t + 1 and the hidden state at t: every position before the last token.
  if (max <= 0 || !cache_ || done_ + rows != len - 1 || rows == 0) return Status::ok();
  if (len - 1 + max > cache_->capacity()) return Status::ok();
  logits_.resize(static_cast<size_t>(vocab));
  out_.resize(static_cast<size_t>(rows * hid));
  const int32_t block = 0;
  SeqSlice s;
  s.tokens = history.data() + done_ + 1;
  s.count = rows;
  s.start = done_;
  s.blocks = &block;
  MX_RETURN_IF_ERROR(head_.forward_mtp(std::span<const SeqSlice>(&s, 1), cache_->paged(),
                                       pending_.data(), logits_.data(), out_.data()));
  done_ = len - 1;
  pending_.clear();
  std::vector<float> y(out_.end() - hid, out_.end());
  out->push_back(static_cast<int32_t>(argmax(logits_.data(), vocab)));
  // The chain: each guess with the head's own output as the hidden state, one row a time at
  // the positions after done_, which the next catch-up computes again.
  for (int i = 1; i < max; ++i) {
    s.tokens = &out->back();
    s.count = 1;
    s.start = done_ + i - 1;
    MX_RETURN_IF_ERROR(head_.forward_mtp(std::span<const SeqSlice>(&s, 1), cache_->paged(),
                                         y.data(), logits_.data(), out_.data()));
    y.assign(out_.begin(), out_.begin() + hid);
    out->push_back(static_cast<int32_t>(argmax(logits_.data(), vocab)));
  }
  return Status::ok();
}

Status DraftModelDrafter::begin(int64_t capacity) {
  if (!cache_ || cache_->capacity() < capacity) {
    cache_ = std::make_unique<KvCache>(model_.config(), capacity, model_.kv_dtype());
    if (model_.config().is_hybrid()) cache_->paged().reserve_saved_states(1);
  }
  fed_.clear();
  chained_ = false;
  return Status::ok();
}

Status DraftModelDrafter::catch_up(std::span<const int32_t> history, int room) {
  const auto len = static_cast<int64_t>(history.size());
  if (!cache_ || len + room > cache_->capacity()) {
    MX_RETURN_IF_ERROR(begin(std::max<int64_t>(2 * (len + room), 256)));
  }
  // What the cache holds stays where the history agrees with it; a recurrent state cannot go
  // back, so a hybrid model that disagrees starts over.
  size_t same = 0;
  while (same < fed_.size() && same < history.size() && fed_[same] == history[same]) ++same;
  const bool hybrid = model_.config().is_hybrid();
  if (same < fed_.size() && hybrid) same = 0;
  if (static_cast<int64_t>(same) == len) same = hybrid ? 0 : same - 1;  // a row to score
  if (hybrid && chained_ && same > 0) cache_->paged().load_state(0, 0);
  fed_.resize(same);
  logits_.resize(static_cast<size_t>(model_.config().vocab_size));
  const int32_t block = 0;
  SeqSlice s;
  s.tokens = history.data() + same;
  s.count = len - static_cast<int64_t>(same);
  s.start = static_cast<int64_t>(same);
  s.blocks = &block;
  MX_RETURN_IF_ERROR(
      model_.forward_batch(std::span<const SeqSlice>(&s, 1), cache_->paged(), logits_.data()));
  fed_.assign(history.begin(), history.end());
  if (hybrid) cache_->paged().save_state(0, 0);
  chained_ = false;
  return Status::ok();
}

Status DraftModelDrafter::prefill(std::span<const int32_t> prompt) {
  return prompt.empty() ? Status::ok() : catch_up(prompt, kMaxDraftTokens + 1);
}

Status DraftModelDrafter::propose(std::span<const int32_t> history, int max,
                                  std::vector<int32_t>* out) {
  out->clear();
  const auto len = static_cast<int64_t>(history.size());
  const int64_t vocab = model_.config().vocab_size;
  if (max <= 0 || len == 0) return Status::ok();
  MX_RETURN_IF_ERROR(catch_up(history, max));
  const int32_t block = 0;
  SeqSlice s;
  s.blocks = &block;
  for (int i = 0; i < max; ++i) {
    const auto guess = static_cast<int32_t>(argmax(logits_.data(), vocab));
    if (guess >= vocab_limit_) break;  // a padding row of the draft's lm_head
    out->push_back(guess);
    if (i + 1 == max) break;
    s.tokens = &out->back();
    s.count = 1;
    s.start = len + i;
    chained_ = true;
    MX_RETURN_IF_ERROR(
        model_.forward_batch(std::span<const SeqSlice>(&s, 1), cache_->paged(), logits_.data()));
  }
  return Status::ok();
}

std::unique_ptr<Drafter> make_drafter(const SpeculativeOptions& o) {
  if (o.algorithm == SpecAlgorithm::kNgram) return std::make_unique<NgramDrafter>();
  return nullptr;
}

void RowCost::record(int rows, double seconds) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0)) return;
  double& c = c_[static_cast<size_t>(rows)];
  c = c > 0 ? 0.8 * c + 0.2 * seconds : seconds;
  top_ = std::max(top_, rows);
}

double RowCost::at(int rows, double none) const {
  rows = std::clamp(rows, 1, kMaxRows);
  int lo = rows, hi = rows;
  while (lo >= 1 && !(c_[static_cast<size_t>(lo)] > 0)) --lo;
  while (hi <= kMaxRows && !(c_[static_cast<size_t>(hi)] > 0)) ++hi;
  if (lo >= 1 && hi <= kMaxRows) {
    if (lo == hi) return c_[static_cast<size_t>(lo)];
    const double f = static_cast<double>(rows - lo) / static_cast<double>(hi - lo);
    return c_[static_cast<size_t>(lo)] +
           f * (c_[static_cast<size_t>(hi)] - c_[static_cast<size_t>(lo)]);
  }
  if (lo >= 1) return c_[static_cast<size_t>(lo)];
  return hi <= kMaxRows ? c_[static_cast<size_t>(hi)] : none;
}

double RowCost::at_scaled(int rows, double none) const {
  rows = std::clamp(rows, 1, kMaxRows);
  if (top_ == 0 || rows <= top_) return at(rows, none);
  return c_[static_cast<size_t>(top_)] * static_cast<double>(rows) / static_cast<double>(top_);
}

DraftPolicy::DraftPolicy(int max_k) : max_k_(std::clamp(max_k, 0, kMaxDraftTokens)) {}

double DraftPolicy::acceptance() const { return kept_ / (kept_ + rejected_); }

double DraftPolicy::expected_tokens(int k, double a) {
  a = std::clamp(a, 0.0, 0.999);
  return (1.0 - std::pow(a, k + 1)) / (1.0 - a);
}

int DraftPolicy::best_k(std::span<const double> cost_by_rows, double a, int max_k) {
  int best = 0;
  double best_rate = 1.0 / cost_by_rows[1];
  for (int k = 1; k <= max_k; ++k) {
    const double rate = expected_tokens(k, a) / cost_by_rows[static_cast<size_t>(k + 1)];
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

bool RowCost::measured_up_to(int rows) const {
  for (int r = std::min(rows, kMaxRows); r >= 1; --r) {
    if (c_[static_cast<size_t>(r)] > 0) return true;
  }
  return false;
}

int DraftPolicy::choose(const RowCost& cost, int base_rows, const RowCost* draft) {
  // Plain steps first: what drafting saves is measured against them.
  if (max_k_ == 0 || !cost.measured_up_to(base_rows)) return 0;
  std::array<double, kMaxDraftTokens + 2> c{};
  for (int r = 1; r <= max_k_ + 1; ++r) {
    c[static_cast<size_t>(r)] = cost.at(base_rows - 1 + r);
    if (draft != nullptr && r > 1) c[static_cast<size_t>(r)] += draft->at_scaled(r - 1, 0.0);
  }
  int best = best_k(c, acceptance(), max_k_);
  // Acceptance changes with the text: a sequence that stopped drafting tries one guess now
  // and then, so that its estimate can recover; not where guesses cost more than they could
  // save if all were kept (a draft model as slow as the target, whose probe would first catch
  // up on every token since the last one).
  if (best == 0 && ++since_draft_ >= 32) {
    best = best_k(c, 1.0, max_k_) > 0 ? 1 : 0;
    since_draft_ = 0;
  }
  if (best > 0) since_draft_ = 0;
  return best;
}

void DraftPolicy::record_acceptance(int drafted, int accepted) {
  if (drafted <= 0) return;
  constexpr double kDecay = 0.95;
  kept_ = kDecay * kept_ + accepted;
  rejected_ = kDecay * rejected_ + (accepted < drafted ? 1 : 0);
}

double SpecStats::acceptance_rate() const {
  return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
}

double SpecStats::mean_accepted_length() const {
  return verify_steps > 0 ? 1.0 + static_cast<double>(accepted) / static_cast<double>(verify_steps)
                          : 0.0;
}

}  // namespace mx
