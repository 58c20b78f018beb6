// One generation request on the wire: its sequences (best_of per prompt) as the engine runs
// them, their text split into reasoning, content and tool calls, and the replies: a stream of
// chunks that interleave the choices, or one JSON object once every sequence has finished.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"

namespace mx {

// Turns one sequence's raw text into the message's parts. Streamed: each push gives delta
// objects ({"content"}, {"reasoning_content"}, {"tool_calls": [...]}) to send now.
class OutputParser {
 public:
  virtual ~OutputParser() = default;
  virtual std::vector<OJson> push(const std::string& text) = 0;
  virtual std::vector<OJson> finish() = 0;
  // The whole reply: sets content, reasoning_content and tool_calls on `message`; true when
  // it holds tool calls.
  virtual bool whole(const std::string& text, OJson* message) = 0;
};
using OutputParserFactory = std::function<std::unique_ptr<OutputParser>()>;

struct JobSetup {
  std::string rid, model, path;
  bool chat = false, stream = false, include_usage = false, want_logprobs = false;
  bool echo = false;
  int n = 1, best_of = 1, prompts = 1;
  std::vector<std::string> prompt_texts;  // for echo
  // With return_token_ids: each prompt's ids (a vision request's with its images expanded).
  bool return_token_ids = false;
  std::vector<std::vector<int32_t>> prompt_ids;
  OutputParserFactory parser;  // null: the text is the content
  const std::atomic<bool>* shutting_down = nullptr;
  std::function<void(uint64_t)> on_sequence_done;  // engine id of a sequence that ended
};

class CompletionJob {
 public:
  CompletionJob(JobSetup setup, const Tokenizer& tok, std::shared_ptr<HttpExchange> ex);

  size_t sequences() const { return seqs_.size(); }
  // The engine id of sequence `s` (prompt s / best_of, candidate s % best_of), once submitted.
  void admitted(size_t s, uint64_t engine_id);
  // An event of sequence `s`; events before admitted() wait.
  void on_event(size_t s, const StreamEvent& e);
  // The request failed before any sequence produced output (every submitted one is cancelled
  // by the caller).
  void fail(const HttpError& e);
  std::vector<uint64_t> engine_ids();
  void log_line(int status, int64_t prompt, int64_t completion, const std::string& outcome);

 private:
  struct Seq {
    uint64_t engine_id = 0;
    bool ready = false, finished = false, sent_role = false;
    std::vector<StreamEvent> early;
    std::unique_ptr<LogprobsJson> lps;
    std::unique_ptr<OutputParser> parser;
    std::string text;
    std::vector<int32_t> token_ids;
    double cumulative_logprob = 0;
    int64_t prompt_tokens = 0, completion_tokens = 0;
    int64_t spec_drafted = 0, spec_accepted = 0;
    std::string finish_reason;
    OJson stop_reason;
  };
  void handle(size_t s, const StreamEvent& e);
  void stream_event(size_t s, const StreamEvent& e);
  void send_chunk(size_t s, const OJson& delta_or_text, const OJson& reason,
                  const std::vector<TokenLogprob>& lps);
  void all_done();
  void end_stream(bool cut_short);
  OJson choice_json(size_t s, int index);
  OJson usage() const;
  int index_of(size_t s) const;

  JobSetup setup_;
  const Tokenizer& tok_;
  std::shared_ptr<HttpExchange> ex_;
  std::mutex mu_;
  std::vector<Seq> seqs_;
  size_t finished_ = 0;
  bool done_ = false, any_cancelled_ = false;
  int64_t created_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mx
