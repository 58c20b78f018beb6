#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/deltanet.h"

#include "core/log.h"

namespace mx {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
// A model with recurrent state (linear-attention layers): prefill chunks aligned to the
// chunked delta rule's chunks (and whole blocks), so that every split of a prompt computes the
// same bits; with prefix caching, as many saved states as running requests twice over.
SchedulerConfig for_model(SchedulerConfig c, const ModelConfig& m, bool replays, int dp_size) {
  // Under data-parallel attention each rank's requests hold blocks of its own pool, and a
  // cached block would be on one rank only.
  c.dp_size = dp_size;
  if (c.prefix_caching && dp_size > 1) {
    c.prefix_caching = false;
    MX_LOG_INFO("prefix caching is off: under --enable-dp-attention it is not available yet");
  }
  const bool hybrid = std::any_of(m.layer_kinds.begin(), m.layer_kinds.end(),
                                  [](LayerKind k) { return k == LayerKind::kLinearAttention; });
  if (!hybrid) return c;
  c.prefill_align = std::lcm<int64_t>(c.block_size, kDeltaChunk);
  c.state_interval = (256 + c.prefill_align - 1) / c.prefill_align * c.prefill_align;
  if (c.chunked_prefill_size < c.prefill_align) {
    MX_LOG_INFO("chunked prefill of " + std::to_string(c.chunked_prefill_size) +
                " tokens raised to " + std::to_string(c.prefill_align) +
                ", the recurrent layers' chunk");
    c.chunked_prefill_size = c.prefill_align;
  }
  // Expert-parallel replicas keep their own recurrent states, which a saved one would not reach.
  if (c.prefix_caching && replays) {
    c.prefix_caching = false;
    MX_LOG_INFO(
        "prefix caching is off: a hybrid model's saved states under --ep-size are not "
        "available yet");
  }
  if (c.prefix_caching) c.state_entries = 2 * c.max_running_requests;
  return c;
}
bool uses_history(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}
// Whether a request's next rows need only their largest logit (SeqSlice::top1_logits): greedy,
// and nothing that reads or moves the others (log-probs, a grammar, penalties, logit_bias, end
// tokens still masked by min_tokens).
bool wants_top1_only(const EngineRequest& r, int64_t generated) {
  const SamplingParams& p = r.params;
  return (p.temperature <= 0.0f || p.top_k == 1) && r.top_logprobs < 0 && r.grammar == nullptr &&
         !uses_history(p) && p.logit_bias.empty() && generated >= p.min_tokens;
}
}  // namespace

Engine::Engine(DecoderModel& model, const Tokenizer& tok, const SchedulerConfig& config,
               const SpeculativeOptions& spec, DecoderModel* draft_model)
    : model_(model),
      tok_(tok),
      config_(for_model(config, model.config(), model.replays_steps(), model.dp_size())),
      kv_(model.config(), config.num_blocks, config.block_size, model.kv_dtype(),
          config.max_running_requests),
      sched_(config_),
      spec_(spec),
      drafter_(make_drafter(spec)),
      mtp_head_(spec.algorithm == SpecAlgorithm::kMtp ? draft_model : nullptr),
      draft_model_(spec.algorithm == SpecAlgorithm::kDraft ? draft_model : nullptr) {
  stats_.kv_blocks_total = static_cast<int64_t>(config.num_blocks) * model.dp_size();
  drafts_ = drafter_ != nullptr || mtp_head_ != nullptr || draft_model_ != nullptr;
  kv_.reserve_saved_states(config_.state_entries);
  if (drafts_) {
    kv_.reserve_state_steps(spec.num_draft_tokens + 1);
    stats_.spec_accepted_per_pos.assign(static_cast<size_t>(spec.num_draft_tokens), 0);
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Result<uint64_t> Engine::submit(EngineRequest req) {
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  if (n == 0) return invalid_argument("the prompt is empty");
  // Checked here, not only by the model: a bad id found in a batch would end the whole batch.
  for (int32_t t : req.prompt) {
    if (t < 0 || t >= model_.config().vocab_size) {
      return invalid_argument("token id " + std::to_string(t) + " is outside the model's " +
                              std::to_string(model_.config().vocab_size) + "-token vocabulary");
    }
  }
  const int64_t ctx = model_.config().max_position_embeddings;
  if (req.params.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  if (n > ctx || req.params.max_tokens > ctx - n) {
    return invalid_argument("the prompt (" + std::to_string(n) + " tokens) plus max_tokens (" +
                            std::to_string(req.params.max_tokens) +
                            ") exceeds the context length of " + std::to_string(ctx));
  }
  if (req.multimodal != nullptr) {
    if (req.multimodal->ids != req.prompt) {
      return invalid_argument("a multimodal request's prompt must be its expanded ids");
    }
    if (model_.replays_steps()) {
      return invalid_argument("images are not served under expert parallelism");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  MX_RETURN_IF_ERROR(sched_.add(id, req.multimodal ? req.multimodal->cache_keys : req.prompt,
                                req.params.max_tokens));
  inbox_.push_back({id, std::move(req), std::chrono::steady_clock::now()});
  wake_.notify_all();
  return id;
}

void Engine::run_between_steps(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.push_back(std::move(task));
  wake_.notify_all();
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  wake_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.running = static_cast<int64_t>(sched_.running());
  s.waiting = static_cast<int64_t>(sched_.waiting());
  s.kv_blocks_used = sched_.held_blocks();
  s.kv_blocks_cached = sched_.prefix_cache().cached_blocks();
  s.prefix_cache_queries = sched_.prefix_stats().queries;
  s.prefix_cache_hits = sched_.prefix_stats().hits;
  return s;
}

void Engine::finish(uint64_t id, const std::string& reason) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& l = it->second;
  StreamEvent ev;
  if (reason != "cancelled") {
    bool stopped = false;
    ev.text = l.text->finish(&stopped);
  }
  ev.finished = true;
  ev.finish_reason = reason;
  if (reason == "stop") ev.stop_reason = l.text->stop_reason();
  ev.prompt_tokens = static_cast<int64_t>(l.req.prompt.size());
  ev.completion_tokens = static_cast<int64_t>(l.tokens.size() - l.req.prompt.size());
  ev.spec_draft_tokens = l.drafted;
  ev.spec_accepted_tokens = l.kept;
  if (l.req.on_event) l.req.on_event(ev);
  const double e2e = seconds_since(l.arrival);
  live_.erase(it);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.finished_requests;
  if (reason != "cancelled") stats_.e2e_latency.observe(e2e);
}

void Engine::loop() {
  std::vector<std::function<void()>> tasks;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] {
        return stop_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty() ||
               sched_.running() > 0 || sched_.waiting() > 0;
      });
      if (stop_) break;
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) t();
    tasks.clear();
    step_once();
  }
  // Tasks still queued at shutdown run now: each answers its client.
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) t();
  // Requests still live at shutdown end as cancelled.
  std::vector<uint64_t> ids;
  for (const auto& [id, _] : live_) ids.push_back(id);
  for (uint64_t id : ids) finish(id, "cancelled");
}

int32_t Engine::sample_for(Live& l, float* row, bool* ended, int32_t draft, bool* accepted) {
  const int64_t vocab = model_.config().vocab_size;
  const SamplingParams& p = l.req.params;
  const auto split = l.tokens.begin() + static_cast<std::ptrdiff_t>(l.req.prompt.size());
  apply_logit_processors(row, vocab, p, l.tokens.end() - split);
  if (l.req.grammar) {
    // Tokens past the tokenizer's vocabulary (padding rows of the lm_head) are never allowed.
    const int64_t words = (vocab + 31) / 32;
    l.mask.assign(static_cast<size_t>(words), 0);
    l.req.grammar->fill_mask(l.mask.data());
    for (int64_t w = 0; w < words; ++w) {
      const uint32_t bits = l.mask[static_cast<size_t>(w)];
      if (bits == ~0u) continue;
      for (int64_t t = w * 32; t < std::min(vocab, w * 32 + 32); ++t) {
        if (!(bits >> (t & 31) & 1u)) row[t] = -INFINITY;
      }
    }
  }
  static const std::vector<int32_t> none;
  std::vector<int32_t> prompt, output;
  if (uses_history(p)) {
    prompt.assign(l.tokens.begin(), split);
    output.assign(split, l.tokens.end());
  }
  const int32_t id = accepted != nullptr
                         ? l.sampler->verify(row, vocab, prompt, output, draft, accepted)
                         : l.sampler->sample(row, vocab, prompt, output);
  // A grammar that is complete ends the output; one that cannot take the token (no allowed
  // token had a finite logit) ends it too rather than emit text outside the grammar.
  *ended = l.req.grammar && (!l.req.grammar->accept(id) || l.req.grammar->must_end());
  return id;
}

void Engine::draft_guesses(std::unique_lock<std::mutex>& lock) {
  if (!drafts_) return;
  // The step's rows without guesses: one per decoding request (prefill rows come on top).
  struct Want {
    uint64_t id;
    int k;
  };
  std::vector<Want> wants;
  int base = 0;
  for (const auto& [id, l] : live_) {
    const SeqInfo* info = sched_.find(id);
    base += info != nullptr && info->decoding() ? 1 : 0;
  }
  for (auto& [id, l] : live_) {
    const SeqInfo* info = sched_.find(id);
    l.draft.clear();
    if (info == nullptr || !info->decoding() || l.stopped) continue;
    const int64_t room = l.req.params.max_tokens - info->generated - 1;
    const int k =
        static_cast<int>(std::min<int64_t>(l.policy.choose(row_cost_, base, &draft_cost_), room));
    if (k > 0) wants.push_back({id, k});
  }
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  for (const Want& w : wants) {
    Live& l = live_.at(w.id);
    const auto t = std::chrono::steady_clock::now();
    // A drafter that fails drafts nothing: the request decodes plainly.
    if (!drafter_of(l)->propose(l.tokens, w.k, &l.draft).is_ok()) l.draft.clear();
    if (static_cast<int>(l.draft.size()) > w.k) l.draft.resize(static_cast<size_t>(w.k));
    if (!l.draft.empty()) draft_cost_.record(static_cast<int>(l.draft.size()), seconds_since(t));
    // Under a grammar, guesses past the first it refuses would be verified only to be
    // rejected: the verify rows stop there.
    if (l.req.grammar) l.draft.resize(l.req.grammar->allowed_prefix(l.draft));
  }
  const double secs = seconds_since(t0);
  lock.lock();
  stats_.spec_draft_seconds += secs;
  for (const Want& w : wants) {
    sched_.set_draft(w.id, static_cast<int32_t>(live_.at(w.id).draft.size()));
  }
}

void Engine::observe_hidden(const BatchPlan& plan, const std::vector<std::vector<int32_t>>& yielded,
                            const std::vector<size_t>& samplers) {
  const int64_t hid = model_.config().hidden_size;
  int64_t row = 0;
  size_t next = 0;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const PlanItem& item = plan.items[i];
    const bool samples = next < samplers.size() && samplers[next] == i;
    // A verified item's rows stand up to the last kept guess.
    const int64_t stand =
        samples && item.guesses > 0 ? static_cast<int64_t>(yielded[next].size()) : item.count;
    if (samples) ++next;
    auto it = live_.find(item.id);
    if (it != live_.end() && it->second.own_drafter) {
      Drafter& d = *it->second.own_drafter;
      // A request (re)starting from its first position starts its drafter over.
      Status st = item.start == 0 ? d.begin(static_cast<int64_t>(it->second.req.prompt.size()) +
                                            it->second.req.params.max_tokens + kMaxDraftTokens + 1)
                                  : Status::ok();
      if (st.is_ok()) st = d.observe(item.start, stand, hidden_.data() + row * hid);
      if (!st.is_ok()) MX_LOG_ERROR("drafter: " + st.to_string());
    }
    row += item.count;
  }
}

std::vector<int32_t> Engine::sample_item(uint64_t id, const PlanItem& item, int32_t slot,
                                         float* rows, std::chrono::steady_clock::time_point now,
                                         bool* stopped) {
  const int64_t vocab = model_.config().vocab_size;
  Live& l = live_.at(id);
  StreamEvent ev;
  std::vector<float> raw;
  int32_t kept = 0;
  for (int32_t r = 0; r <= item.guesses && !*stopped; ++r) {
    float* row = rows + r * vocab;
    if (l.req.top_logprobs >= 0) raw.assign(row, row + vocab);
    bool ended = false, accepted = false;
    const bool guess = r < item.guesses;
    const int32_t tok = guess
                            ? sample_for(l, row, &ended, l.draft[static_cast<size_t>(r)], &accepted)
                            : sample_for(l, row, &ended);
    l.tokens.push_back(tok);
    ev.tokens.push_back(tok);
    const TextStream::Step ts = l.text->push(tok);
    ev.text += ts.delta;
    if (!raw.empty())
      ev.logprobs.push_back(token_logprob(raw.data(), vocab, tok, l.req.top_logprobs));
    *stopped = ts.stop || ended;
    if (guess && !accepted) break;
    kept += guess ? 1 : 0;
  }
  // Latencies per token: a step that yields several spreads its time over them.
  const bool first = l.tokens.size() == l.req.prompt.size() + ev.tokens.size();
  const double dt = std::chrono::duration<double>(now - (first ? l.arrival : l.last_token)).count();
  (first ? ttft_ : itl_).push_back(first ? dt : dt / static_cast<double>(ev.tokens.size()));
  for (size_t i = 1; i < ev.tokens.size(); ++i)
    itl_.push_back(dt / static_cast<double>(ev.tokens.size()));
  l.last_token = now;
  if (item.guesses > 0) {
    l.policy.record_acceptance(item.guesses, kept);
    l.drafted += item.guesses;
    l.kept += kept;
    // The recurrent state returns to the one after the last kept position.
    if (kept < item.guesses) model_.restore_state(kv_, slot, kept);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.spec_drafts;
    stats_.spec_draft_tokens += item.guesses;
    stats_.spec_accepted_tokens += kept;
    for (int32_t p = 0; p < kept; ++p) ++stats_.spec_accepted_per_pos[static_cast<size_t>(p)];
  }
  if (l.req.on_event) l.req.on_event(ev);
  return ev.tokens;
}

void Engine::take_inbox() {
  for (Pending& in : inbox_) {
    Live l;
    l.tokens = in.req.prompt;
    l.sampler = std::make_unique<Sampler>(in.req.params);
    l.req = std::move(in.req);
    l.arrival = in.arrival;
    l.text = std::make_unique<TextStream>(tok_, l.req.params);
    l.policy = DraftPolicy(drafts_ ? spec_.num_draft_tokens : 0);
    if (mtp_head_ != nullptr) l.own_drafter = std::make_unique<MtpDrafter>(*mtp_head_);
    // Its cache grows with the sequence as it drafts.
    if (draft_model_ != nullptr) {
      l.own_drafter = std::make_unique<DraftModelDrafter>(
          *draft_model_, std::min<int64_t>(model_.config().vocab_size, tok_.vocab_size()));
    }
    stats_.prompt_tokens += static_cast<int64_t>(l.tokens.size());
    live_.emplace(in.id, std::move(l));
  }
  inbox_.clear();
}

void Engine::multimodal_slice(Live& l, const PlanItem& item, SeqSlice* s) {
  const MultimodalPrompt& mm = *l.req.multimodal;
  s->rope_delta = mm.positions.rope_delta;
  const auto plen = static_cast<int64_t>(mm.ids.size());
  if (item.guesses > 0 || item.start >= plen) return;  // text after the prompt
  const int64_t end = item.start + item.count;
  if (end <= plen) {
    s->embeds = mm.rows.data() + item.start;
    s->mrope = mm.positions.pos.data() + 3 * item.start;
    return;
  }
  if (static_cast<int64_t>(l.mm_rows.size()) < end) {
    l.mm_rows = mm.rows;
    l.mm_pos = mm.positions.pos;
    for (int64_t i = plen; i < end; ++i) {
      l.mm_rows.push_back(nullptr);
      l.mm_pos.insert(l.mm_pos.end(), 3, i + mm.positions.rope_delta);
    }
  }
  s->embeds = l.mm_rows.data() + item.start;
  s->mrope = l.mm_pos.data() + 3 * item.start;
}

void Engine::step_once() {
  BatchPlan plan;
  std::vector<uint64_t> cancelled;
  {
    std::unique_lock<std::mutex> lock(mu_);
    take_inbox();
    for (uint64_t id : cancels_) {
      if (sched_.cancel(id)) cancelled.push_back(id);
    }
    cancels_.clear();
    draft_guesses(lock);
    // After drafting, which lets go of the lock: what arrived meanwhile is admitted too.
    take_inbox();
    plan = sched_.schedule();
    stats_.preemptions += static_cast<int64_t>(plan.preempted.size());
  }
  for (uint64_t id : cancelled) finish(id, "cancelled");
  if (plan.empty()) return;
  std::vector<SeqSlice> slices;
  std::vector<size_t> samplers;  // plan items that sample
  std::vector<int32_t> slots;
  int64_t logit_rows = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < plan.items.size(); ++i) {
      const PlanItem& item = plan.items[i];
      const SeqInfo* info = sched_.find(item.id);
      Live& l = live_.at(item.id);
      SeqSlice s;
      s.tokens = l.tokens.data() + item.start;
      s.count = item.count;
      s.start = item.start;
      s.blocks = info->table.blocks.data();
      s.slot = info->slot;
      s.dp_rank = std::max(0, info->rank);
      s.top1_logits =
          wants_top1_only(l.req, static_cast<int64_t>(l.tokens.size() - l.req.prompt.size()));
      s.logits = item.samples ? SeqSlice::Logits::kLast : SeqSlice::Logits::kNone;
      // Generated tokens recomputed after preemption round as their decode steps did.
      s.stepwise = item.start >= static_cast<int64_t>(l.req.prompt.size());
      if (item.guesses > 0) {
        l.feed.assign(1, l.tokens.back());
        l.feed.insert(l.feed.end(), l.draft.begin(), l.draft.begin() + item.guesses);
        s.tokens = l.feed.data();
        s.logits = SeqSlice::Logits::kAll;
        s.keep_states = true;
      }
      if (l.req.multimodal != nullptr) multimodal_slice(l, item, &s);
      slices.push_back(s);
      slots.push_back(info->slot);
      if (item.samples) samplers.push_back(i);
      if (item.samples) logit_rows += 1 + item.guesses;
    }
  }
  const int64_t vocab = model_.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(logit_rows * vocab));
  if (mtp_head_ != nullptr) {
    hidden_.resize(static_cast<size_t>(plan.tokens() * model_.config().hidden_size));
  }
  // A cached prefix's recurrent state comes in before the step, and a kept one goes out after.
  for (size_t i = 0; i < plan.items.size(); ++i) {
    if (plan.items[i].load_state >= 0) kv_.load_state(plan.items[i].load_state, slots[i]);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = model_.forward_batch(slices, kv_, logits.data(),
                                         mtp_head_ != nullptr ? hidden_.data() : nullptr);
  if (!st.is_ok()) {
    // A request the model rejects cannot be served; end it rather than the server.
    MX_LOG_ERROR("engine step failed: " + st.to_string());
    for (const PlanItem& item : plan.items) cancel(item.id);
    return;
  }
  row_cost_.record(static_cast<int>(std::min<int64_t>(plan.tokens(), RowCost::kMaxRows)),
                   seconds_since(t0));
  for (size_t i = 0; i < plan.items.size(); ++i) {
    if (plan.items[i].save_state >= 0) kv_.save_state(slots[i], plan.items[i].save_state);
  }
  std::vector<uint64_t> stopped;
  std::vector<std::vector<int32_t>> yielded;
  ttft_.clear();
  itl_.clear();
  const auto now = std::chrono::steady_clock::now();
  int64_t row = 0, generated = 0;
  for (size_t i : samplers) {
    const PlanItem& item = plan.items[i];
    bool stop = false;
    yielded.push_back(
        sample_item(item.id, item, slots[i], logits.data() + row * vocab, now, &stop));
    row += 1 + item.guesses;
    generated += static_cast<int64_t>(yielded.back().size());
    if (stop) {
      live_.at(item.id).stopped = true;
      stopped.push_back(item.id);
    }
  }
  if (mtp_head_ != nullptr) observe_hidden(plan, yielded, samplers);
  std::vector<uint64_t> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired = sched_.complete_runs(plan, yielded, stopped);
    stats_.generated_tokens += generated;
    for (double t : ttft_) stats_.time_to_first_token.observe(t);
    for (double t : itl_) stats_.inter_token_latency.observe(t);
    ++stats_.steps;
  }
  for (uint64_t id : retired) finish(id, live_.at(id).stopped ? "stop" : "length");
}

}  // namespace mx
