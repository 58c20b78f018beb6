// One request from prompt to text on one model: prefill, then sample token by token with
// stop strings, stop tokens and a token budget. Text streams out through a callback with no
// broken UTF-8 and nothing that might still turn out to be part of a stop string.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "runtime/multimodal.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"
#include "text/tokenizer.h"

namespace mx {

struct GenerateResult {
  std::string text;
  std::vector<int32_t> token_ids;
  std::string finish_reason;  // "stop" or "length"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;    // after the first generated token
  std::vector<float> logprobs;  // with GenerateOptions::logprobs
  SpecStats spec;
  double prefill_tok_s() const;
  double decode_tok_s() const;
};

// Finds the earliest stop string in `text` at or after `from`; npos when none. `which`, when
// given, receives the index of the stop string found.
size_t find_stop(const std::string& text, size_t from, const std::vector<std::string>& stops,
                 size_t* which = nullptr);
// How many trailing bytes of `text` could begin a stop string and must be held back.
size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops);

// The text side of one generation: feeds sampled tokens through the incremental decoder and
// the stop rules, and says what may be shown now.
class TextStream {
 public:
  TextStream(const Tokenizer& tok, const SamplingParams& params)
      : params_(params), dec_(tok, params.skip_special_tokens) {}
  struct Step {
    std::string delta;  // text that can be shown now (may be empty)
    bool stop = false;  // a stop token or stop string ended the generation
  };
  // What ended the generation, as vLLM's stop_reason: the stop string or the stop token id
  // from the request; null for the model's end token or none.
  const nlohmann::json& stop_reason() const { return stop_reason_; }
  Step push(int32_t id);
  // At the end of a generation that ran out of budget: whatever was held back.
  std::string finish(bool* stopped);
  const std::string& text() const { return text_; }

 private:
  SamplingParams params_;  // a copy: the request that owns the original may move
  IncrementalDecoder dec_;
  bool stopped_by_string(size_t from);

  std::string text_;
  size_t emitted_ = 0;
  int64_t tokens_ = 0;
  nlohmann::json stop_reason_;
};

struct GenerateOptions {
  // Speculative decoding: the same tokens under greedy decoding, the same distribution when
  // sampling.
  SpeculativeOptions spec;
  // Instead of spec.algorithm's drafter (tests, embedders); not owned.
  Drafter* drafter = nullptr;
  // GenerateResult::logprobs: each token's log-probability under the raw logits.
  bool logprobs = false;
  // Images in the prompt (the prompt is then multimodal->ids); not owned.
  const MultimodalPrompt* multimodal = nullptr;
};

// Fails when the prompt plus one token does not fit the context.
Result<GenerateResult> generate(DecoderModel& model, const Tokenizer& tok,
                                const std::vector<int32_t>& prompt, const SamplingParams& params,
                                int64_t context_length,
                                const std::function<void(const std::string&)>& on_text = {},
                                const GenerateOptions& options = {});

}  // namespace mx
