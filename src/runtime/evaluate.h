// Model quality: perplexity over a text in windows, few-shot exact-match accuracy over a JSONL
// task, and, against a reference model on the same tokens, mean KL divergence and top-1
// agreement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "text/tokenizer.h"

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
  int64_t invalid = 0;  // predictions that are not a number
  int64_t ref_correct = 0;
  double accuracy() const;
  double invalid_rate() const;
  double ref_accuracy() const;
};

// One scored question of a few-shot task.
struct TaskItem {
  std::string prompt;
  std::string answer;
};

// Reads a JSONL task. With shots < 0 each row's "prompt" is used as it is (its examples are
// part of the file). With shots >= 0 prompts are built from "question" and "answer" the way
// few-shot harnesses build them: the first `shots` rows become worked examples
// ("<question> <answer>\n" each) before every later row's question, and are not scored.
Result<std::vector<TaskItem>> load_task(const std::string& jsonl_path, int64_t shots = -1,
                                        int64_t max_questions = 0);

// Generation stops at a newline or at the start of a next question, and the prediction is
// the text before either, stripped; shared by the local and the HTTP evaluators so that the
// same greedy text scores the same.
const std::vector<std::string>& task_stop_strings();
std::string task_prediction(const std::string& generated);
bool is_number(const std::string& s);

// Greedy answers of at most `max_new_tokens`, stopping at task_stop_strings() or a stop token.
Result<TaskResult> evaluate_task(DecoderModel& model, DecoderModel* ref, const Tokenizer& tok,
                                 const std::vector<TaskItem>& items,
                                 const std::vector<int32_t>& stop_ids, int64_t max_new_tokens = 8);

}  // namespace mx
