#include "server/completion_job.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/log.h"

namespace mx {
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string sse(const OJson& j) { return "data: " + j.dump() + "\n\n"; }

}  // namespace

CompletionJob::CompletionJob(JobSetup setup, const Tokenizer& tok, std::shared_ptr<HttpExchange> ex)
    : setup_(std::move(setup)), tok_(tok), ex_(std::move(ex)) {
  start_ = Clock::now();
  created_ = now_seconds();
  seqs_.resize(static_cast<size_t>(setup_.prompts) * static_cast<size_t>(setup_.best_of));
  for (Seq& q : seqs_) {
    q.lps = std::make_unique<LogprobsJson>(tok_, setup_.chat);
    if (setup_.parser) q.parser = setup_.parser();
  }
}

void CompletionJob::log_line(int status, int64_t prompt, int64_t completion,
                             const std::string& outcome) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3g s",
                std::chrono::duration<double>(Clock::now() - start_).count());
  int64_t drafted = 0, kept = 0;
  for (const Seq& q : seqs_) drafted += q.spec_drafted, kept += q.spec_accepted;
  const std::string spec = drafted > 0 ? ", " + std::to_string(kept) + " of " +
                                             std::to_string(drafted) + " drafted tokens accepted"
                                       : std::string();
  MX_LOG_INFO("request " + setup_.rid + " " + setup_.path + ": " + std::to_string(status) + ", " +
              std::to_string(prompt) + " prompt + " + std::to_string(completion) +
              " completion tokens, " + secs + ", " + outcome + spec);
}

std::vector<uint64_t> CompletionJob::engine_ids() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> ids;
  for (const Seq& q : seqs_) {
    if (q.ready && !q.finished) ids.push_back(q.engine_id);
  }
  return ids;
}

void CompletionJob::fail(const HttpError& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  done_ = true;
  log_line(e.status, 0, 0, e.message);
  if (!setup_.stream || !seqs_[0].ready) {
    ex_->send({e.status, "application/json", error_body(e)});
    return;
  }
  // A sibling refused after the stream began: the stream ends with the error as its last event.
  ex_->write("data: " + error_body(e) + "\n\n");
  ex_->write("data: [DONE]\n\n");
  ex_->end();
}

void CompletionJob::admitted(size_t s, uint64_t engine_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Seq& q = seqs_[s];
  q.engine_id = engine_id;
  q.ready = true;
  if (s == 0 && setup_.stream && !done_) ex_->start_stream(200, "text/event-stream");
  std::vector<StreamEvent> early = std::move(q.early);
  for (const StreamEvent& e : early) handle(s, e);
}

void CompletionJob::on_event(size_t s, const StreamEvent& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!seqs_[s].ready) return seqs_[s].early.push_back(e);
  handle(s, e);
}

int CompletionJob::index_of(size_t s) const {
  // Streams have best_of == n, so every sequence is a choice.
  return static_cast<int>(s);
}

void CompletionJob::send_chunk(size_t s, const OJson& delta_or_text, const OJson& reason,
                               const std::vector<TokenLogprob>& lps) {
  Seq& q = seqs_[s];
  OJson choice = {{"index", index_of(s)}};
  if (setup_.chat) {
    OJson delta = delta_or_text;
    if (!q.sent_role) {
      OJson d = {{"role", "assistant"}};
      if (delta.is_object()) d.update(delta);
      if (!d.contains("content") && !d.contains("tool_calls") && !d.contains("reasoning_content"))
        d["content"] = "";
      delta = d;
    }
    choice["delta"] = delta;
  } else {
    choice["text"] = delta_or_text;
  }
  q.sent_role = true;
  choice["logprobs"] = setup_.want_logprobs && !lps.empty() ? q.lps->add(lps) : OJson();
  choice["finish_reason"] = reason;
  if (!reason.is_null()) choice["stop_reason"] = q.stop_reason;
  OJson j = {{"id", setup_.rid},
             {"object", setup_.chat ? "chat.completion.chunk" : "text_completion"},
             {"created", created_},
             {"model", setup_.model},
             {"choices", OJson::array({choice})}};
  if (setup_.include_usage) j["usage"] = nullptr;
  ex_->write(sse(j));
}

void CompletionJob::stream_event(size_t s, const StreamEvent& e) {
  Seq& q = seqs_[s];
  q.text += e.text;
  const bool has_lp = setup_.want_logprobs && !e.logprobs.empty();
  std::string text = e.text;
  if (!q.sent_role && setup_.echo) text = setup_.prompt_texts[s / setup_.best_of] + text;
  if (!setup_.chat || !q.parser) {
    const OJson payload = setup_.chat ? OJson{{"content", text}} : OJson(text);
    if (!text.empty() || has_lp) send_chunk(s, payload, nullptr, e.logprobs);
    return;
  }
  std::vector<OJson> deltas = q.parser->push(text);
  if (deltas.empty() && has_lp) deltas.push_back({{"content", ""}});
  for (size_t i = 0; i < deltas.size(); ++i) {
    send_chunk(s, deltas[i], nullptr, i == 0 ? e.logprobs : std::vector<TokenLogprob>{});
  }
}

void CompletionJob::handle(size_t s, const StreamEvent& e) {
  Seq& q = seqs_[s];
  if (done_) {
    // A failed request's other sequences still leave the server's list of live ones.
    if (e.finished && setup_.on_sequence_done) setup_.on_sequence_done(q.engine_id);
    return;
  }
  for (const TokenLogprob& lp : e.logprobs) q.cumulative_logprob += lp.logprob;
  q.token_ids.insert(q.token_ids.end(), e.tokens.begin(), e.tokens.end());
  if (!e.finished) {
    if (setup_.stream) return stream_event(s, e);
    q.text += e.text;
    if (setup_.want_logprobs && !e.logprobs.empty()) q.lps->add(e.logprobs);
    return;
  }
  q.finished = true;
  ++finished_;
  q.prompt_tokens = e.prompt_tokens;
  q.completion_tokens = e.completion_tokens;
  q.spec_drafted = e.spec_draft_tokens;
  q.spec_accepted = e.spec_accepted_tokens;
  q.finish_reason = e.finish_reason;
  q.stop_reason = e.stop_reason;
  if (e.finish_reason == "cancelled") any_cancelled_ = true;
  if (setup_.on_sequence_done) setup_.on_sequence_done(q.engine_id);
  if (setup_.stream && e.finish_reason != "cancelled") {
    StreamEvent last = e;
    last.finished = false;
    stream_event(s, last);
    OJson tail = setup_.chat ? OJson::object() : OJson("");
    if (setup_.chat && q.parser) {
      for (const OJson& d : q.parser->finish()) send_chunk(s, d, nullptr, {});
      // A reply that called tools ends with tool_calls, as vLLM's streams do.
      if (q.finish_reason == "stop" && q.parser->whole(q.text, nullptr)) {
        q.finish_reason = "tool_calls";
      }
    }
    send_chunk(s, tail, q.finish_reason, {});
  } else if (!setup_.stream) {
    q.text += e.text;
    if (setup_.want_logprobs && !e.logprobs.empty()) q.lps->add(e.logprobs);
  }
  if (finished_ == seqs_.size()) all_done();
}

OJson CompletionJob::usage() const {
  int64_t prompt = 0, completion = 0;
  for (size_t s = 0; s < seqs_.size(); ++s) {
    // The prompt counts once per prompt, not once per sequence (as vLLM counts it).
    if (s % static_cast<size_t>(setup_.best_of) == 0) prompt += seqs_[s].prompt_tokens;
    completion += seqs_[s].completion_tokens;
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

OJson CompletionJob::choice_json(size_t s, int index) {
  Seq& q = seqs_[s];
  OJson choice = {{"index", index}};
  std::string reason = q.finish_reason;
  if (setup_.chat) {
    OJson message = {{"role", "assistant"}, {"content", q.text}};
    if (q.parser && q.parser->whole(q.text, &message) && reason == "stop") reason = "tool_calls";
    choice["message"] = message;
  } else {
    choice["text"] = setup_.echo ? setup_.prompt_texts[s / setup_.best_of] + q.text : q.text;
  }
  choice["logprobs"] = setup_.want_logprobs ? q.lps->all() : OJson();
  choice["finish_reason"] = reason;
  choice["stop_reason"] = q.stop_reason;
  if (setup_.return_token_ids) {
    choice["token_ids"] = q.token_ids;
    // vLLM: a completion's choices each carry their prompt's ids, a chat reply carries them
    // once beside the choices.
    if (!setup_.chat) choice["prompt_token_ids"] = setup_.prompt_ids[s / setup_.best_of];
  }
  return choice;
}

void CompletionJob::all_done() {
  done_ = true;
  const bool cut_short = any_cancelled_ && setup_.shutting_down && setup_.shutting_down->load();
  const OJson u = usage();
  const int64_t prompt = u["prompt_tokens"].get<int64_t>();
  const int64_t completion = u["completion_tokens"].get<int64_t>();
  if (setup_.stream) {
    if (any_cancelled_ && !cut_short) return log_line(499, prompt, completion, "client went away");
    end_stream(cut_short);
    return log_line(cut_short ? 503 : 200, prompt, completion,
                    cut_short ? "cut short by shutdown" : "finish " + seqs_[0].finish_reason);
  }
  if (cut_short) {
    const HttpError e{503, "the server shut down before the request finished", "server_error"};
    log_line(e.status, 0, 0, e.message);
    return ex_->send({e.status, "application/json", error_body(e)});
  }
  if (any_cancelled_) return log_line(499, prompt, completion, "client went away");
  OJson choices = OJson::array();
  const size_t best_of = static_cast<size_t>(setup_.best_of);
  for (size_t p = 0; p < static_cast<size_t>(setup_.prompts); ++p) {
    std::vector<size_t> order(best_of);
    std::iota(order.begin(), order.end(), p * best_of);
    // best_of: the n sequences with the highest cumulative log-probability, in that order.
    if (best_of > static_cast<size_t>(setup_.n)) {
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return seqs_[a].cumulative_logprob > seqs_[b].cumulative_logprob;
      });
    }
    for (size_t i = 0; i < static_cast<size_t>(setup_.n); ++i) {
      choices.push_back(choice_json(order[i], static_cast<int>(choices.size())));
    }
  }
  OJson out = {
      {"id", setup_.rid},    {"object", setup_.chat ? "chat.completion" : "text_completion"},
      {"created", created_}, {"model", setup_.model},
      {"choices", choices},  {"usage", u}};
  if (setup_.return_token_ids && setup_.chat) out["prompt_token_ids"] = setup_.prompt_ids[0];
  ex_->send({200, "application/json", out.dump()});
  log_line(200, prompt, completion, "finish " + seqs_[0].finish_reason);
}

void CompletionJob::end_stream(bool cut_short) {
  if (cut_short) {
    // The stream's last event says why it ended, as vLLM's error events do.
    const HttpError err{503, "the server shut down before the request finished", "server_error"};
    ex_->write("data: " + error_body(err) + "\n\n");
  } else if (setup_.include_usage) {
    ex_->write(sse({{"id", setup_.rid},
                    {"object", setup_.chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created_},
                    {"model", setup_.model},
                    {"choices", OJson::array()},
                    {"usage", usage()}}));
  }
  ex_->write("data: [DONE]\n\n");
  ex_->end();
}

}  // namespace mx
