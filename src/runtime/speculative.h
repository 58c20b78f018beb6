// Speculative decoding: a drafter guesses the next tokens, one forward pass scores the last
// sampled token and the guesses together, and the verifier keeps the guesses the model agrees
// with. Greedy keeps a guess while it equals the model's own choice; sampling keeps it with
// probability min(1, p/q) and otherwise draws from the rest of p, so that the output follows
// the model's distribution exactly (Leviathan et al. 2023). How many tokens to guess is
// chosen each step from the acceptance so far and the measured cost of scoring more rows.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace mx {

enum class SpecAlgorithm { kNone, kNgram, kMtp, kDraft };

struct SpeculativeOptions {
  SpecAlgorithm algorithm = SpecAlgorithm::kNone;
  int num_draft_tokens = 4;  // the most one step guesses (K)
  // Off: every step guesses num_draft_tokens whatever they cost (as vLLM's fixed K).
  bool adaptive = true;
  // kDraft: the smaller model with the same tokenizer (--speculative-draft-model-path).
  std::string draft_model_path = {};
};
inline constexpr int kMaxDraftTokens = 16;
// Why mtp is refused under --ep-size and --tp-size: the head shares the target's lm_head, whose
// vocabulary rows are split over the ranks, and runs on rank 0 alone.
inline constexpr const char* kNoMtpUnderEp =
    "--speculative-algorithm mtp under --ep-size or --tp-size is not available yet (the head "
    "shares the target's lm_head, split over the ranks); use ngram or draft";

// --speculative-algorithm as SGLang and vLLM spell it ("" or "none": off). Names of drafters
// that exist elsewhere but not here get an error that says so.
Result<SpecAlgorithm> parse_spec_algorithm(std::string_view name);
const char* spec_algorithm_name(SpecAlgorithm a);

// Proposes the tokens likely to follow a sequence. A drafter may propose fewer than asked,
// or none. One drafter follows one sequence at a time.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // A new sequence of at most `capacity` positions, guesses included.
  virtual Status begin(int64_t capacity) { return Status::ok(); }
  // Whether observe() wants the target's final-normed hidden states (MTP, DFlash).
  virtual bool needs_hidden() const { return false; }
  // The target scored positions [start, start + count) and they stand (rejected guesses are
  // not observed): their hidden states, [count, hidden_size].
  virtual Status observe(int64_t start, int64_t count, const float* hidden) { return Status::ok(); }
  // The prompt, while the target prefills it, so that the first draft costs only its guesses
  // (a draft model's own prefill).
  virtual Status prefill(std::span<const int32_t> prompt) { return Status::ok(); }
  // `history`: prompt then output, the last sampled token included (not yet scored).
  virtual Status propose(std::span<const int32_t> history, int max, std::vector<int32_t>* out) = 0;
};

// Prompt lookup, as llama.cpp's n-gram modes: the longest suffix of the history (max_n down
// to min_n tokens) that occurred before, most recent occurrence first, and the tokens that
// followed it there. No model.
class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(int min_n = 2, int max_n = 4) : min_n_(min_n), max_n_(max_n) {}
  Status propose(std::span<const int32_t> history, int max, std::vector<int32_t>* out) override;

 private:
  int min_n_, max_n_;
};

// The checkpoint's MTP head (load_mtp_head), greedy: row t takes token t + 1 and the target's
// hidden state at t. Rows the target has confirmed are computed once with its hidden states
// (catching up over every position scored since the last draft); the chain then feeds back
// the head's own output after mtp.norm for each further guess, in rows that the next catch-up
// overwrites.
class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(DecoderModel& head) : head_(head) {}
  Status begin(int64_t capacity) override;
  bool needs_hidden() const override { return true; }
  Status observe(int64_t start, int64_t count, const float* hidden) override;
  Status propose(std::span<const int32_t> history, int max, std::vector<int32_t>* out) override;

 private:
  DecoderModel& head_;
  std::unique_ptr<KvCache> cache_;
  int64_t done_ = 0;            // rows computed with the target's hidden states
  std::vector<float> pending_;  // hidden states of positions done_ .. done_ + rows - 1
  std::vector<float> logits_, out_;
};

// A smaller model with the target's tokenizer, greedy: each propose() first runs the tokens
// confirmed since the last one (the last sampled token, and the guesses the target kept) in
// one pass, then one row a guess, at positions the next catch-up overwrites; a hybrid draft
// model's recurrent state goes back to the one saved after the confirmed tokens. Each
// sequence has its own; the model is shared.
class DraftModelDrafter : public Drafter {
 public:
  // Guesses stop before a token id at or past `vocab_limit` (the target's vocabulary).
  DraftModelDrafter(DecoderModel& model, int64_t vocab_limit)
      : model_(model), vocab_limit_(vocab_limit) {}
  Status begin(int64_t capacity) override;
  Status prefill(std::span<const int32_t> prompt) override;
  Status propose(std::span<const int32_t> history, int max, std::vector<int32_t>* out) override;

 private:
  // Runs the tokens of `history` the cache does not hold, leaving the last one's logits, with
  // room for `room` more positions.
  Status catch_up(std::span<const int32_t> history, int room);

  DecoderModel& model_;
  int64_t vocab_limit_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> fed_;  // the confirmed tokens the cache holds, in order
  bool chained_ = false;      // guesses ran after fed_ (a recurrent state to restore)
  std::vector<float> logits_;
};

// The drafters that need no model (ngram); null for none or one that needs a model.
std::unique_ptr<Drafter> make_drafter(const SpeculativeOptions& o);

// Forward time by the rows of a step, measured as the run goes (a decayed mean per count).
class RowCost {
 public:
  static constexpr int kMaxRows = 1024;
  void record(int rows, double seconds);
  // A count not measured yet: interpolated between the nearest measured counts around it;
  // past the largest measured, what that one costs, so that a policy reading it tries wider
  // steps once; below the smallest, what that one costs; `none` when nothing is measured.
  double at(int rows, double none = 1.0) const;
  // As at(), but past the largest measured count in proportion to the count: what a drafter
  // whose every guess is a forward of its own costs.
  double at_scaled(int rows, double none = 1.0) const;
  // Whether some count up to `rows` has been measured.
  bool measured_up_to(int rows) const;

 private:
  std::array<double, kMaxRows + 1> c_{};
  int top_ = 0;  // the largest count measured
};

// Chooses how many tokens one sequence drafts. Acceptance is a decayed count of kept and
// rejected guesses. With acceptance a per guess, k guesses yield (1 - a^(k+1)) / (1 - a)
// tokens a step; the choice maximizes tokens per second of the step the sequence is in, and
// 0 (plain decode) wins when nothing pays.
class DraftPolicy {
 public:
  explicit DraftPolicy(int max_k);
  // `base_rows`: the step's rows without this sequence's guesses (1 for a sequence alone);
  // `draft`: the drafter's time by the number of guesses (null: free).
  int choose(const RowCost& cost, int base_rows = 1, const RowCost* draft = nullptr);
  // After a verify step: `drafted` guesses, the first `accepted` of them kept.
  void record_acceptance(int drafted, int accepted);
  double acceptance() const;
  // Tokens one step yields with k guesses at acceptance a per guess.
  static double expected_tokens(int k, double a);
  // The k in 0..max_k with the most tokens per second, given each width's cost
  // (cost_by_rows[r]: a forward of r rows, r = 1..max_k + 1).
  static int best_k(std::span<const double> cost_by_rows, double a, int max_k);

 private:
  int max_k_;
  double kept_ = 1, rejected_ = 1;  // a prior of one each
  int since_draft_ = 0;
};

// What speculation did over a generation: vLLM's spec_decode counters and the time split.
struct SpecStats {
  int64_t verify_steps = 0;  // forwards that scored guesses
  int64_t drafted = 0, accepted = 0;
  double draft_seconds = 0, verify_seconds = 0;
  double acceptance_rate() const;
  // Tokens per verify step: the accepted guesses plus the one the model adds.
  double mean_accepted_length() const;
};

}  // namespace mx
