#include "runtime/engine.h"

#include <algorithm>
#include <cmath>

#include "core/log.h"

namespace mx {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
// Prefix caching reuses keys and values only; a model with recurrent state (linear-attention
// layers) would also need that state at the prefix's end, which is not kept.
SchedulerConfig checked_prefix_caching(SchedulerConfig c, const ModelConfig& m) {
  for (LayerKind k : m.layer_kinds) {
    if (c.prefix_caching && k == LayerKind::kLinearAttention) {
      c.prefix_caching = false;
      MX_LOG_INFO("prefix caching is off: the model keeps recurrent state, which is not cached");
    }
  }
  return c;
}
bool uses_history(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}
}  // namespace

Engine::Engine(DecoderModel& model, const Tokenizer& tok, const SchedulerConfig& config)
    : model_(model),
      tok_(tok),
      config_(checked_prefix_caching(config, model.config())),
      kv_(model.config(), config.num_blocks, config.block_size, model.kv_dtype(),
          config.max_running_requests),
      sched_(config_) {
  stats_.kv_blocks_total = config.num_blocks;
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
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  MX_RETURN_IF_ERROR(sched_.add(id, req.prompt, req.params.max_tokens));
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

int32_t Engine::sample_for(Live& l, float* row, bool* ended) {
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
  int32_t id;
  if (uses_history(p)) {
    const std::vector<int32_t> prompt(l.tokens.begin(), split), output(split, l.tokens.end());
    id = l.sampler->sample(row, vocab, prompt, output);
  } else {
    static const std::vector<int32_t> none;
    id = l.sampler->sample(row, vocab, none, none);
  }
  // A grammar that is complete ends the output; one that cannot take the token (no allowed
  // token had a finite logit) ends it too rather than emit text outside the grammar.
  *ended = l.req.grammar && (!l.req.grammar->accept(id) || l.req.grammar->must_end());
  return id;
}

void Engine::step_once() {
  BatchPlan plan;
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Pending& in : inbox_) {
      Live l;
      l.tokens = in.req.prompt;
      l.sampler = std::make_unique<Sampler>(in.req.params);
      l.req = std::move(in.req);
      l.arrival = in.arrival;
      l.text = std::make_unique<TextStream>(tok_, l.req.params);
      stats_.prompt_tokens += static_cast<int64_t>(l.tokens.size());
      live_.emplace(in.id, std::move(l));
    }
    inbox_.clear();
    for (uint64_t id : cancels_) {
      if (sched_.cancel(id)) cancelled.push_back(id);
    }
    cancels_.clear();
    plan = sched_.schedule();
    stats_.preemptions += static_cast<int64_t>(plan.preempted.size());
  }
  for (uint64_t id : cancelled) finish(id, "cancelled");
  if (plan.empty()) return;
  std::vector<SeqSlice> slices;
  std::vector<uint64_t> samplers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const PlanItem& item : plan.items) {
      const SeqInfo* info = sched_.find(item.id);
      Live& l = live_.at(item.id);
      SeqSlice s;
      s.tokens = l.tokens.data() + item.start;
      s.count = item.count;
      s.start = item.start;
      s.blocks = info->table.blocks.data();
      s.slot = info->slot;
      s.logits = item.samples ? SeqSlice::Logits::kLast : SeqSlice::Logits::kNone;
      slices.push_back(s);
      if (item.samples) samplers.push_back(item.id);
    }
  }
  const int64_t vocab = model_.config().vocab_size;
  std::vector<float> logits(samplers.size() * static_cast<size_t>(vocab));
  const Status st = model_.forward_batch(slices, kv_, logits.data());
  if (!st.is_ok()) {
    // A request the model rejects cannot be served; end it rather than the server.
    MX_LOG_ERROR("engine step failed: " + st.to_string());
    for (const PlanItem& item : plan.items) cancel(item.id);
    return;
  }
  std::vector<uint64_t> stopped;
  std::vector<int32_t> sampled;
  std::vector<double> ttft, itl;
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < samplers.size(); ++i) {
    Live& l = live_.at(samplers[i]);
    float* row = logits.data() + i * static_cast<size_t>(vocab);
    std::vector<float> raw;
    if (l.req.top_logprobs >= 0) raw.assign(row, row + vocab);
    bool ended = false;
    const int32_t id = sample_for(l, row, &ended);
    const bool first = l.tokens.size() == l.req.prompt.size();
    (first ? ttft : itl)
        .push_back(std::chrono::duration<double>(now - (first ? l.arrival : l.last_token)).count());
    l.last_token = now;
    l.tokens.push_back(id);
    sampled.push_back(id);
    const TextStream::Step ts = l.text->push(id);
    if (ts.stop || ended) {
      l.stopped = true;
      stopped.push_back(samplers[i]);
    }
    StreamEvent ev;
    ev.text = ts.delta;
    ev.tokens = {id};
    if (!raw.empty())
      ev.logprobs.push_back(token_logprob(raw.data(), vocab, id, l.req.top_logprobs));
    if (l.req.on_event) l.req.on_event(ev);
  }
  std::vector<uint64_t> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired = sched_.complete(plan, sampled, stopped);
    stats_.generated_tokens += static_cast<int64_t>(samplers.size());
    for (double t : ttft) stats_.time_to_first_token.observe(t);
    for (double t : itl) stats_.inter_token_latency.observe(t);
    ++stats_.steps;
  }
  for (uint64_t id : retired) finish(id, live_.at(id).stopped ? "stop" : "length");
}

}  // namespace mx
