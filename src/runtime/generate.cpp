#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace mx {

double GenerateResult::prefill_tok_s() const {
  return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0;
}
double GenerateResult::decode_tok_s() const {
  const double n = static_cast<double>(token_ids.size()) - 1;
  return decode_seconds > 0 && n > 0 ? n / decode_seconds : 0;
}

size_t find_stop(const std::string& text, size_t from, const std::vector<std::string>& stops,
                 size_t* which) {
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& s = stops[i];
    if (s.empty()) continue;
    const size_t p = text.find(s, from);
    if (p < best) {
      best = p;
      if (which) *which = i;
    }
  }
  return best;
}

size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t n = std::min(s.size() - 1, text.size()); n > hold; --n) {
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  return hold;
}

bool TextStream::stopped_by_string(size_t from) {
  size_t which = 0;
  const size_t stop_at = find_stop(text_, from, params_.stop, &which);
  if (stop_at == std::string::npos) return false;
  const std::string& stop = params_.stop[which];
  text_.resize(params_.include_stop_str_in_output ? stop_at + stop.size() : stop_at);
  stop_reason_ = stop;
  return true;
}

TextStream::Step TextStream::push(int32_t id) {
  Step st;
  // Before min_tokens nothing stops the output (the sampler masks the end tokens).
  const bool armed = ++tokens_ > params_.min_tokens;
  const auto has = [id](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  if (armed && has(params_.forced_stop_token_ids)) {
    stop_reason_ = id;
    st.stop = true;
    return st;
  }
  if (armed && has(params_.stop_token_ids) && !params_.ignore_eos) {
    st.stop = true;
    return st;
  }
  const size_t before = text_.size();
  text_ += dec_.push(id);
  if (armed) st.stop = stopped_by_string(before >= 64 ? before - 64 : 0);
  const size_t ready = st.stop ? text_.size() : text_.size() - stop_holdback(text_, params_.stop);
  if (ready > emitted_) {
    st.delta = text_.substr(emitted_, ready - emitted_);
    emitted_ = ready;
  }
  return st;
}

std::string TextStream::finish(bool* stopped) {
  text_ += dec_.flush();
  // A stop string may complete only with the bytes flushed last.
  *stopped = tokens_ >= params_.min_tokens && stopped_by_string(0);
  std::string rest = text_.size() > emitted_ ? text_.substr(emitted_) : std::string();
  emitted_ = text_.size();
  return rest;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One generation's decode loop: the last sampled token not yet in the cache is fed with the
// drafter's guesses; the verifier walks the rows, and the cache and recurrent state go back
// to the last kept position.
class Decoder {
 public:
  Decoder(DecoderModel& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
          const SamplingParams& params, const GenerateOptions& opt, KvCache& cache,
          GenerateResult& r, const std::function<void(const std::string&)>& on_text)
      : model_(model),
        mm_(opt.multimodal),
        prompt_(prompt),
        params_(params),
        cache_(cache),
        r_(r),
        on_text_(on_text),
        vocab_(model.config().vocab_size),
        owned_(opt.drafter ? nullptr : make_drafter(opt.spec)),
        drafter_(opt.drafter ? opt.drafter : owned_.get()),
        policy_(drafter_ ? opt.spec.num_draft_tokens : 0),
        adaptive_(opt.spec.adaptive),
        fixed_k_(opt.spec.num_draft_tokens),
        logprobs_(opt.logprobs),
        sampler_(params),
        stream_(tok, params),
        logits_(static_cast<size_t>((policy_max(opt) + 1) * vocab_)) {
    history_ = prompt;
    if (drafter_) cache_.paged().reserve_state_steps(opt.spec.num_draft_tokens + 1);
    if (drafter_ && drafter_->needs_hidden()) {
      const int64_t rows =
          std::max<int64_t>(static_cast<int64_t>(prompt.size()), opt.spec.num_draft_tokens + 1);
      hidden_.resize(static_cast<size_t>(rows * model.config().hidden_size));
    }
  }

  // Prefill, then tokens until a stop or `budget`.
  Status run(int64_t budget) {
    const auto t0 = Clock::now();
    if (drafter_) MX_RETURN_IF_ERROR(drafter_->begin(cache_.capacity() + kMaxDraftTokens + 1));
    const auto n = static_cast<int64_t>(prompt_.size());
    MX_RETURN_IF_ERROR(feed(prompt_.data(), n, false));
    MX_RETURN_IF_ERROR(observe(0, n));
    if (drafter_) MX_RETURN_IF_ERROR(drafter_->prefill(prompt_));
    r_.finish_reason = "length";
    int32_t last = 0;
    bool stop = false;
    if (budget > 0) stop = push(sample(logits_.data(), -1, nullptr), &last);
    r_.prefill_seconds = seconds_since(t0);
    const auto t_first = Clock::now();
    while (!stop && generated() < budget) {
      MX_RETURN_IF_ERROR(step(last, budget, &stop, &last));
    }
    if (!stop) {
      bool stopped = false;
      const std::string rest = stream_.finish(&stopped);
      if (stopped) r_.finish_reason = "stop";
      if (on_text_ && !rest.empty()) on_text_(rest);
    }
    r_.decode_seconds = seconds_since(t_first);
    r_.text = stream_.text();
    return Status::ok();
  }

 private:
  static int policy_max(const GenerateOptions& o) {
    return o.drafter == nullptr && o.spec.algorithm == SpecAlgorithm::kNone
               ? 0
               : o.spec.num_draft_tokens;
  }
  int64_t generated() const { return static_cast<int64_t>(r_.token_ids.size()); }

  // Samples from a row of logits; with a draft, verifies it (*accepted says the outcome).
  int32_t sample(float* row, int32_t draft, bool* accepted) {
    if (logprobs_) {
      // Read before the processors and penalties change the row; the token is not known yet.
      std::copy(row, row + vocab_, raw_.begin());
    }
    const int32_t id = sample_processed(row, draft, accepted);
    if (logprobs_) r_.logprobs.push_back(token_logprob(raw_.data(), vocab_, id, 0).logprob);
    return id;
  }
  int32_t sample_processed(float* row, int32_t draft, bool* accepted) {
    apply_logit_processors(row, vocab_, params_, generated());
    if (accepted == nullptr) return sampler_.sample(row, vocab_, prompt_, r_.token_ids);
    return sampler_.verify(row, vocab_, prompt_, r_.token_ids, draft, accepted);
  }

  // Records a sampled token; true when it ends the generation.
  bool push(int32_t id, int32_t* last) {
    r_.token_ids.push_back(id);
    history_.push_back(id);
    *last = id;
    const TextStream::Step st = stream_.push(id);
    if (on_text_ && !st.delta.empty()) on_text_(st.delta);
    if (st.stop) r_.finish_reason = "stop";
    return st.stop;
  }

  // Feeds `last` and the guesses, then keeps what the verifier accepts.
  Status step(int32_t last, int64_t budget, bool* stop, int32_t* next) {
    // Each kept guess is a token, and the last row samples one more.
    const int room = static_cast<int>(std::min<int64_t>(kMaxDraftTokens, budget - generated() - 1));
    draft_.clear();
    if (drafter_ && room > 0) {
      const int k = std::min(adaptive_ ? policy_.choose(cost_, 1, &draft_cost_) : fixed_k_, room);
      if (k > 0) {
        const auto t = Clock::now();
        MX_RETURN_IF_ERROR(drafter_->propose(history_, k, &draft_));
        if (static_cast<int>(draft_.size()) > k) draft_.resize(static_cast<size_t>(k));
        const double secs = seconds_since(t);
        if (!draft_.empty()) draft_cost_.record(static_cast<int>(draft_.size()), secs);
        r_.spec.draft_seconds += secs;
      }
    }
    const auto n = static_cast<int64_t>(draft_.size());
    feed_.assign(1, last);
    feed_.insert(feed_.end(), draft_.begin(), draft_.end());
    const int64_t before = cache_.length();
    const auto t = Clock::now();
    MX_RETURN_IF_ERROR(feed(feed_.data(), n + 1, n > 0));
    const double secs = seconds_since(t);
    cost_.record(static_cast<int>(n + 1), secs);
    if (n > 0) r_.spec.verify_seconds += secs, ++r_.spec.verify_steps;
    int64_t kept = 0;
    for (int64_t i = 0; i <= n && !*stop; ++i) {
      bool accepted = false;
      float* row = logits_.data() + i * vocab_;
      const int32_t id =
          i < n ? sample(row, draft_[static_cast<size_t>(i)], &accepted) : sample(row, -1, nullptr);
      *stop = push(id, next);
      if (i < n && !accepted) break;
      kept += i < n ? 1 : 0;
    }
    if (n > 0) {
      policy_.record_acceptance(static_cast<int>(n), static_cast<int>(kept));
      r_.spec.drafted += n;
      r_.spec.accepted += kept;
      if (kept < n) rollback(before, kept);
    }
    return observe(before, kept + 1);
  }

  // Scores `n` tokens after the cache's: the last row's logits, or every row's when verifying
  // (whose recurrent states are kept for a rollback); the hidden states too for a drafter that
  // reads them.
  Status feed(const int32_t* tokens, int64_t n, bool verify) {
    SeqSlice s;
    const int32_t block = 0;
    s.tokens = tokens;
    s.count = n;
    s.start = cache_.length();
    s.blocks = &block;
    s.logits = verify ? SeqSlice::Logits::kAll : SeqSlice::Logits::kLast;
    s.keep_states = verify;
    if (mm_ != nullptr) {
      s.rope_delta = mm_->positions.rope_delta;
      if (s.start + n <= static_cast<int64_t>(mm_->rows.size())) {
        s.embeds = mm_->rows.data() + s.start;
        s.mrope = mm_->positions.pos.data() + 3 * s.start;
      }
    }
    if (s.start + n > cache_.capacity()) {
      return invalid_argument("sequence of " + std::to_string(s.start + n) +
                              " tokens exceeds the KV cache capacity of " +
                              std::to_string(cache_.capacity()));
    }
    MX_RETURN_IF_ERROR(model_.forward_batch(std::span<const SeqSlice>(&s, 1), cache_.paged(),
                                            logits_.data(),
                                            hidden_.empty() ? nullptr : hidden_.data()));
    cache_.set_length(s.start + n);
    return Status::ok();
  }

  Status observe(int64_t start, int64_t count) {
    if (hidden_.empty()) return Status::ok();
    return drafter_->observe(start, count, hidden_.data());
  }

  // Keeps the fed token and the first `kept` guesses: later keys are overwritten by the next
  // step, and the recurrent state returns to the one after the last kept position.
  void rollback(int64_t before, int64_t kept) {
    cache_.set_length(before + 1 + kept);
    model_.restore_state(cache_.paged(), 0, kept);
  }

  DecoderModel& model_;
  const MultimodalPrompt* mm_;
  const std::vector<int32_t>& prompt_;
  const SamplingParams& params_;
  KvCache& cache_;
  GenerateResult& r_;
  const std::function<void(const std::string&)>& on_text_;
  const int64_t vocab_;
  std::unique_ptr<Drafter> owned_;
  Drafter* drafter_;
  DraftPolicy policy_;
  RowCost cost_, draft_cost_;
  bool adaptive_;
  int fixed_k_;
  bool logprobs_;
  Sampler sampler_;
  TextStream stream_;
  std::vector<float> logits_, raw_ = std::vector<float>(logprobs_ ? vocab_ : 0);
  std::vector<int32_t> history_, draft_, feed_;
  std::vector<float> hidden_;  // the last feed's final-normed rows, for drafter_
};

}  // namespace

Result<GenerateResult> generate(DecoderModel& model, const Tokenizer& tok,
                                const std::vector<int32_t>& prompt, const SamplingParams& params,
                                int64_t context_length,
                                const std::function<void(const std::string&)>& on_text,
                                const GenerateOptions& options) {
  const SpeculativeOptions& spec = options.spec;
  const bool speculates = options.drafter != nullptr || spec.algorithm != SpecAlgorithm::kNone;
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 0) return invalid_argument("the prompt is empty");
  if (n + 1 > context_length) {
    return invalid_argument("the prompt has " + std::to_string(n) +
                            " tokens, more than the context length of " +
                            std::to_string(context_length) + " allows");
  }
  if (speculates && (spec.num_draft_tokens < 1 || spec.num_draft_tokens > kMaxDraftTokens)) {
    return invalid_argument("--speculative-num-draft-tokens must be in 1.." +
                            std::to_string(kMaxDraftTokens));
  }
  if (speculates && model.replays_steps() &&
      (spec.algorithm == SpecAlgorithm::kMtp ||
       (options.drafter && options.drafter->needs_hidden()))) {
    return unimplemented(kNoMtpUnderEp);
  }
  const int64_t budget = std::min<int64_t>(params.max_tokens, context_length - n);
  KvCache cache(model.config(), n + budget, model.kv_dtype());
  GenerateResult r;
  r.prompt_tokens = n;
  Decoder d(model, tok, prompt, params, options, cache, r, on_text);
  MX_RETURN_IF_ERROR(d.run(budget));
  return r;
}

}  // namespace mx
