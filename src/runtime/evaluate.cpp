#include "runtime/evaluate.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string_view>

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
double TaskResult::invalid_rate() const {
  return questions ? static_cast<double>(invalid) / static_cast<double>(questions) : 0;
}
double TaskResult::accuracy() const {
  return questions ? static_cast<double>(correct) / static_cast<double>(questions) : 0;
}
double TaskResult::ref_accuracy() const {
  return questions ? static_cast<double>(ref_correct) / static_cast<double>(questions) : 0;
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
std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

Result<std::string> answer_of(DecoderModel& m, const Tokenizer& tok,
                              const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& stop_ids, int64_t max_new) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = static_cast<int>(max_new);
  p.stop = task_stop_strings();
  p.stop_token_ids = stop_ids;
  MX_ASSIGN_OR_RETURN(GenerateResult g,
                      generate(m, tok, prompt, p, m.config().max_position_embeddings));
  return task_prediction(g.text);
}
}  // namespace

const std::vector<std::string>& task_stop_strings() {
  static const std::vector<std::string> stops = {"\n", "Question"};
  return stops;
}

std::string task_prediction(const std::string& generated) {
  size_t end = generated.size();
  for (const std::string& s : task_stop_strings()) end = std::min(end, generated.find(s));
  return strip(generated.substr(0, end));
}

bool is_number(const std::string& text) {
  std::string_view s(text);
  if (!s.empty() && s.front() == '-') s.remove_prefix(1);
  const size_t dot = s.find('.');
  auto digits = [](std::string_view v) {
    return !v.empty() &&
           std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(s.substr(0, dot)) && (dot == std::string_view::npos || digits(s.substr(dot + 1)));
}

Result<std::vector<TaskItem>> load_task(const std::string& jsonl_path, int64_t shots,
                                        int64_t max_questions) {
  std::ifstream in(jsonl_path);
  if (!in) return not_found(jsonl_path + ": cannot open");
  std::vector<TaskItem> items;
  std::string examples;
  std::string line;
  int64_t line_no = 0, row = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (strip(line).empty()) continue;
    if (max_questions > 0 && static_cast<int64_t>(items.size()) >= max_questions) break;
    const std::string where = jsonl_path + ":" + std::to_string(line_no);
    MX_ASSIGN_OR_RETURN(Json j, parse_json(line, where));
    const char* key = shots < 0 ? "prompt" : "question";
    if (!j.is_object() || !j.contains(key) || !j[key].is_string() || !j.contains("answer")) {
      return invalid_argument(where + ": needs string '" + key + "' and 'answer'");
    }
    const Json& a = j["answer"];
    TaskItem item{j[key].get<std::string>(),
                  strip(a.is_string() ? a.get<std::string>() : a.dump())};
    if (row++ < shots) {
      examples += item.prompt + " " + item.answer + "\n";
      continue;
    }
    if (shots >= 0) item.prompt = examples + item.prompt;
    items.push_back(std::move(item));
  }
  if (items.empty()) return invalid_argument(jsonl_path + ": no questions to score");
  return items;
}

Result<TaskResult> evaluate_task(DecoderModel& model, DecoderModel* ref, const Tokenizer& tok,
                                 const std::vector<TaskItem>& items,
                                 const std::vector<int32_t>& stop_ids, int64_t max_new_tokens) {
  TaskResult r;
  for (const TaskItem& item : items) {
    const std::vector<int32_t> prompt = tok.encode(item.prompt);
    MX_ASSIGN_OR_RETURN(std::string got, answer_of(model, tok, prompt, stop_ids, max_new_tokens));
    ++r.questions;
    if (got == item.answer) ++r.correct;
    if (!is_number(got)) ++r.invalid;
    if (ref != nullptr) {
      MX_ASSIGN_OR_RETURN(std::string rgot, answer_of(*ref, tok, prompt, stop_ids, max_new_tokens));
      if (rgot == item.answer) ++r.ref_correct;
    }
  }
  return r;
}

}  // namespace mx
