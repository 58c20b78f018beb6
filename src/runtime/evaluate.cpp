#include "runtime/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/json_util.h"
#include "kernels/ops.h"
#include "runtime/generate.h"

namespace mx {

double PplResult::perplexity() const {
  return scored_tokens ? std::exp(nll_sum / static_cast<double>(scored_tokens)) : 0;
}
double PplResult::ref_perplexity() const {
  return scored_tokens ? std::exp(ref_nll_sum / static_cast<double>(scored_tokens)) : 0;
}
Result<PplResult> evaluate_perplexity(DecoderModel& model, DecoderModel* ref,
                                      const std::vector<int32_t>& tokens, const PplOptions& opt) {
  if (opt.ctx < 2 || opt.stride < 1 || opt.stride > opt.ctx) {
    return invalid_argument("perplexity needs ctx >= 2 and 1 <= stride <= ctx");
  }
  if (opt.ctx > model.config().max_position_embeddings) {
    return invalid_argument("--ctx " + std::to_string(opt.ctx) +
                            " exceeds the model's context of " +
                            std::to_string(model.config().max_position_embeddings));
  }
  const int64_t vocab = model.config().vocab_size;
  const int64_t total = static_cast<int64_t>(tokens.size());
  PplResult r;
  std::vector<float> logits, ref_logits, lp(static_cast<size_t>(vocab)),
      rlp(static_cast<size_t>(vocab));
  int64_t scored_until = 0;  // targets below this index are scored already
  for (int64_t begin = 0; begin < total - 1; begin += opt.stride) {
    if (opt.max_windows > 0 && r.windows >= opt.max_windows) break;
    const int64_t end = std::min(begin + opt.ctx, total);
    const int64_t n = end - begin;
    if (n < 2) break;
    logits.resize(static_cast<size_t>(n * vocab));
    KvCache cache(model.config(), n, model.kv_dtype());
    MX_RETURN_IF_ERROR(model.forward(tokens.data() + begin, n, cache, true, logits.data()));
    if (ref != nullptr) {
      ref_logits.resize(logits.size());
      KvCache rc(ref->config(), n, ref->kv_dtype());
      MX_RETURN_IF_ERROR(ref->forward(tokens.data() + begin, n, rc, true, ref_logits.data()));
    }
    ++r.windows;
    for (int64_t t = std::max(begin + 1, scored_until); t < end; ++t) {
      const int64_t row = t - 1 - begin;
      const int32_t target = tokens[static_cast<size_t>(t)];
      log_softmax(logits.data() + row * vocab, vocab, lp.data());
      r.nll_sum -= lp[static_cast<size_t>(target)];
      ++r.scored_tokens;
      if (ref != nullptr) {
        log_softmax(ref_logits.data() + row * vocab, vocab, rlp.data());
        r.ref_nll_sum -= rlp[static_cast<size_t>(target)];
        double kl = 0;
        for (int64_t v = 0; v < vocab; ++v)
          kl += std::exp(static_cast<double>(rlp[v])) * (rlp[v] - lp[v]);
        r.kl_sum += kl;
        const auto a1 = std::max_element(lp.begin(), lp.end()) - lp.begin();
        const auto a2 = std::max_element(rlp.begin(), rlp.end()) - rlp.begin();
        if (a1 == a2) ++r.top1_agree;
      }
    }
    scored_until = end;
    if (end == total) break;
  }
  return r;
}

namespace {

struct TaskAnswer {
  std::string prediction;
  std::string text;
  int64_t tokens = 0;
};

Result<TaskAnswer> answer_of(DecoderModel& m, const Tokenizer& tok,
                             const std::vector<int32_t>& prompt, TaskFormat format,
                             const std::vector<int32_t>& stop_ids, int64_t max_new) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = static_cast<int>(max_new);
  p.stop = task_stop_strings(format);
  p.stop_token_ids = stop_ids;
  MX_ASSIGN_OR_RETURN(GenerateResult g,
                      generate(m, tok, prompt, p, m.config().max_position_embeddings));
  return TaskAnswer{task_prediction(g.text, format), g.text,
                    static_cast<int64_t>(g.token_ids.size())};
}

}  // namespace

Result<TaskResult> evaluate_task(DecoderModel& model, DecoderModel* ref, const Tokenizer& tok,
                                 const std::vector<TaskItem>& items,
                                 const std::vector<int32_t>& stop_ids, int64_t max_new_tokens) {
  const int64_t context = model.config().max_position_embeddings;
  TaskResult r;
  for (size_t i = 0; i < items.size(); ++i) {
    const TaskItem& item = items[i];
    const std::vector<int32_t> prompt = tok.encode(item.prompt);
    const int64_t budget = task_max_new_tokens(item.format, max_new_tokens);
    const int64_t n = static_cast<int64_t>(prompt.size());
    if (budget > context - n) {
      return invalid_argument("question " + std::to_string(i + 1) + ": the prompt (" +
                              std::to_string(n) + " tokens) plus " + std::to_string(budget) +
                              " new tokens exceeds the context length of " +
                              std::to_string(context));
    }
    const auto start = std::chrono::steady_clock::now();
    MX_ASSIGN_OR_RETURN(TaskAnswer got,
                        answer_of(model, tok, prompt, item.format, stop_ids, budget));
    r.latency += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.output_tokens += got.tokens;
    r.outputs.push_back(std::move(got.text));
    ++r.questions;
    if (got.prediction == item.answer) ++r.correct;
    if (!is_number(got.prediction)) ++r.invalid;
    if (ref != nullptr) {
      MX_ASSIGN_OR_RETURN(TaskAnswer rgot,
                          answer_of(*ref, tok, prompt, item.format, stop_ids, budget));
      if (rgot.prediction == item.answer) ++r.ref_correct;
    }
  }
  return r;
}

}  // namespace mx
