// Model quality: perplexity over a text in windows, few-shot accuracy over a JSONL task (the
// tasks and their scoring are eval/task.h's), and, against a reference model on the same
// tokens, mean KL divergence and top-1 agreement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "eval/task.h"
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

// Greedy answers of at most task_max_new_tokens(item.format, max_new_tokens), stopping at the
// item's task_stop_strings() or a stop token. A prompt that leaves no room for the budget in
// the context is an error, as the server refuses it.
Result<TaskResult> evaluate_task(DecoderModel& model, DecoderModel* ref, const Tokenizer& tok,
                                 const std::vector<TaskItem>& items,
                                 const std::vector<int32_t>& stop_ids, int64_t max_new_tokens = 0);

}  // namespace mx
