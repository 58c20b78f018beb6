// Model quality: perplexity over a text in windows, few-shot exact-match accuracy over a JSONL
// task, and, against a reference model on the same tokens, mean KL divergence and top-1
// agreement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "loader/tokenizer.h"
#include "model/model.h"

namespace mx {

struct PplOptions {
  int64_t ctx = 256;
  int64_t stride = 256;     // == ctx: non-overlapping windows, each scored on its own
  int64_t max_windows = 0;  // 0: all
};

struct PplResult {
  int64_t windows = 0;
  int64_t scored_tokens = 0;
  double nll_sum = 0;
  double perplexity() const;
  // With a reference model:
  double ref_nll_sum = 0;
  double kl_sum = 0;  // sum over positions of KL(reference || model)
  int64_t top1_agree = 0;
  double ref_perplexity() const;
};

// `ref` may be null. Windows start at 0, stride apart; a window scores the targets after its
// first token that no earlier window scored.
Result<PplResult> evaluate_perplexity(DecoderModel& model, DecoderModel* ref,
                                      const std::vector<int32_t>& tokens, const PplOptions& opt);

struct TaskResult {
  int64_t questions = 0;
  int64_t correct = 0;
  int64_t ref_correct = 0;
  double accuracy() const;
  double ref_accuracy() const;
};

// Rows with "prompt" and "answer": greedy, at most `max_new_tokens`, stop at a newline or a
// stop token; the prediction is the text before the first newline, stripped.
Result<TaskResult> evaluate_task(DecoderModel& model, DecoderModel* ref, const Tokenizer& tok,
                                 const std::string& jsonl_path,
                                 const std::vector<int32_t>& stop_ids, int64_t max_new_tokens = 8,
                                 int64_t max_questions = 0);

}  // namespace mx
