// The serving engine: one thread that runs continuous batching over many requests. Each step
// asks the scheduler for a plan, runs it as one batched forward over the paged KV cache,
// samples for the requests that finished a prefill or a decode step, and streams their text
// through each request's callback. Requests can join and leave (finish, cancel) every step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "runtime/generate.h"
#include "runtime/histogram.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/speculative.h"
#include "text/grammar.h"
#include "text/tokenizer.h"

namespace mx {

// What a request's callback receives; called on the engine thread, so it must not block.
struct StreamEvent {
  std::string text;             // new text (may be empty)
  std::vector<int32_t> tokens;  // tokens sampled this step
  bool finished = false;
  std::string finish_reason;  // "stop", "length" or "cancelled" once finished
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::vector<TokenLogprob> logprobs;  // one per token in `tokens` when requested
  nlohmann::json stop_reason;          // once finished: vLLM's stop_reason
  // Once finished: drafted tokens verified for this request and those kept.
  int64_t spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

struct EngineRequest {
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::function<void(const StreamEvent&)> on_event;
  int top_logprobs = -1;  // < 0: no log-probs; else also this many most likely alternatives
  // Constrained decoding: only tokens the grammar allows are sampled, and the output ends when
  // the grammar is complete.
  std::shared_ptr<GrammarMatcher> grammar = nullptr;
  // Images: `prompt` is then multimodal->ids, whose image rows take the vision tower's
  // embeddings and the multimodal rotary positions.
  std::shared_ptr<const MultimodalPrompt> multimodal = nullptr;
};

struct EngineStats {
  Histogram time_to_first_token, inter_token_latency, e2e_latency;  // seconds
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;  // used: held by requests
  int64_t kv_blocks_cached = 0;                     // in the prefix cache, read or not
  // Prompt tokens looked up in the prefix cache at admission, and those found (vLLM's
  // prefix_cache_queries and prefix_cache_hits).
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;  // totals since start
  int64_t finished_requests = 0, steps = 0, preemptions = 0;
  // Speculative decoding, as vLLM's spec_decode counters: verify steps of a sequence that
  // carried guesses, the guesses, those kept, and those kept at each draft position.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
  double spec_draft_seconds = 0;
};

class Engine {
 public:
  // With `spec`, decode steps verify drafted tokens (the same outputs under greedy decoding,
  // the same distribution when sampling). Under a grammar, each verified row is masked by the
  // grammar as it stands after the rows before it, and drafts stop at the first token it
  // refuses.
  // `draft_model`: the model the drafter runs, the checkpoint's MTP head (load_mtp_head) for
  // spec.algorithm mtp or the draft model for draft; each request then drafts with its own
  // MtpDrafter or DraftModelDrafter over it.
  Engine(DecoderModel& model, const Tokenizer& tok, const SchedulerConfig& config,
         const SpeculativeOptions& spec = {}, DecoderModel* draft_model = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; fails with kOutOfRange only when the waiting queue is full (the server's
  // 503: retry later) and with kInvalidArgument when the request can never run: it exceeds the
  // context or the whole KV cache, or holds a token id outside the vocabulary (a 400).
  Result<uint64_t> submit(EngineRequest req);
  // Stops a request (a client went away); its blocks are freed on the next step and its
  // callback gets a final event with finish_reason "cancelled".
  void cancel(uint64_t id);
  EngineStats stats() const;
  // Runs `task` on the engine thread between two steps, so that it may use the model (an
  // embedding pass, say) while no step does.
  void run_between_steps(std::function<void()> task);

 private:
  struct Live {
    EngineRequest req;
    std::vector<int32_t> tokens;  // prompt then generated
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<TextStream> text;
    std::vector<uint32_t> mask;  // the grammar's token mask, reused each step
    bool stopped = false;
    DraftPolicy policy{0};
    std::unique_ptr<Drafter> own_drafter;  // one that follows this request (MTP)
    std::vector<int32_t> draft, feed;      // the guesses, and the last token followed by them
    // A multimodal prompt's embedding rows and positions carried past its end, for a chunk
    // that recomputes the prompt and generated tokens together after preemption.
    std::vector<const float*> mm_rows;
    std::vector<int64_t> mm_pos;
    int64_t drafted = 0, kept = 0;
    std::chrono::steady_clock::time_point arrival, last_token;
  };
  struct Pending {
    uint64_t id;
    EngineRequest req;
    std::chrono::steady_clock::time_point arrival;
  };
  void loop();
  void step_once();
  // Makes the queued requests live (under mu_).
  void take_inbox();
  // Sets a multimodal request's embeddings, positions and rotary offset on its slice.
  static void multimodal_slice(Live& l, const PlanItem& item, SeqSlice* s);
  void finish(uint64_t id, const std::string& reason);
  // Applies the request's logit processors and grammar to `row` and samples; `ended` is set
  // when the grammar allows nothing more. With `accepted`, verifies the guess `draft`.
  int32_t sample_for(Live& l, float* row, bool* ended, int32_t draft = -1,
                     bool* accepted = nullptr);
  // Drafts for the decoding requests that speculation pays for: which, under mu_; the drafting
  // itself outside it (an MTP head runs a forward), then the scheduler learns the counts.
  void draft_guesses(std::unique_lock<std::mutex>& lock);
  Drafter* drafter_of(Live& l) { return l.own_drafter ? l.own_drafter.get() : drafter_.get(); }
  // Hands each item's rows that stand to its request's drafter (those that read them).
  void observe_hidden(const BatchPlan& plan, const std::vector<std::vector<int32_t>>& yielded,
                      const std::vector<size_t>& samplers);
  // Samples the rows of one item; returns the tokens it yields and sends its event.
  std::vector<int32_t> sample_item(uint64_t id, const PlanItem& item, int32_t slot, float* rows,
                                   std::chrono::steady_clock::time_point now, bool* stopped);

  DecoderModel& model_;
  const Tokenizer& tok_;
  SchedulerConfig config_;
  PagedKv kv_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  Scheduler sched_;                // guarded by mu_
  std::map<uint64_t, Live> live_;  // touched only by the engine thread after admission
  std::vector<Pending> inbox_;
  std::vector<uint64_t> cancels_;
  std::vector<std::function<void()>> tasks_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  EngineStats stats_;
  SpeculativeOptions spec_;
  std::unique_ptr<Drafter> drafter_;
  DecoderModel* mtp_head_;
  DecoderModel* draft_model_;
  bool drafts_ = false;        // some drafter follows the requests
  std::vector<float> hidden_;  // the step's final-normed rows, for drafters that read them
  RowCost row_cost_;
  RowCost draft_cost_;  // one request's drafting by its guesses (a draft model's forwards)
  std::vector<double> ttft_, itl_;  // of the step being sampled
  std::thread thread_;
};

}  // namespace mx
