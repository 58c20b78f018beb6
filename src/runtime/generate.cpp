#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

namespace mx {

double GenerateResult::prefill_tok_s() const {
  return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0;
}
double GenerateResult::decode_tok_s() const {
  const double n = static_cast<double>(token_ids.size()) - 1;
  return decode_seconds > 0 && n > 0 ? n / decode_seconds : 0;
}

size_t find_stop(const std::string& text, size_t from, const std::vector<std::string>& stops,
                 size_t* which) {
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& s = stops[i];
    if (s.empty()) continue;
    const size_t p = text.find(s, from);
    if (p < best) {
      best = p;
      if (which) *which = i;
    }
  }
  return best;
}

size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t n = std::min(s.size() - 1, text.size()); n > hold; --n) {
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  return hold;
}

bool TextStream::stopped_by_string(size_t from) {
  size_t which = 0;
  const size_t stop_at = find_stop(text_, from, params_.stop, &which);
  if (stop_at == std::string::npos) return false;
  const std::string& stop = params_.stop[which];
  text_.resize(params_.include_stop_str_in_output ? stop_at + stop.size() : stop_at);
  stop_reason_ = stop;
  return true;
}

TextStream::Step TextStream::push(int32_t id) {
  Step st;
  // Before min_tokens nothing stops the output (the sampler masks the end tokens).
  const bool armed = ++tokens_ > params_.min_tokens;
  const auto has = [id](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  if (armed && has(params_.forced_stop_token_ids)) {
    stop_reason_ = id;
    st.stop = true;
    return st;
  }
  if (armed && has(params_.stop_token_ids) && !params_.ignore_eos) {
    st.stop = true;
    return st;
  }
  const size_t before = text_.size();
  text_ += dec_.push(id);
  if (armed) st.stop = stopped_by_string(before >= 64 ? before - 64 : 0);
  const size_t ready = st.stop ? text_.size() : text_.size() - stop_holdback(text_, params_.stop);
  if (ready > emitted_) {
    st.delta = text_.substr(emitted_, ready - emitted_);
    emitted_ = ready;
  }
  return st;
}

std::string TextStream::finish(bool* stopped) {
  text_ += dec_.flush();
  // A stop string may complete only with the bytes flushed last.
  *stopped = tokens_ >= params_.min_tokens && stopped_by_string(0);
  std::string rest = text_.size() > emitted_ ? text_.substr(emitted_) : std::string();
  emitted_ = text_.size();
  return rest;
}

Result<GenerateResult> generate(DecoderModel& model, const Tokenizer& tok,
                                const std::vector<int32_t>& prompt, const SamplingParams& params,
                                int64_t context_length,
                                const std::function<void(const std::string&)>& on_text) {
  using clock = std::chrono::steady_clock;
  const int64_t vocab = model.config().vocab_size;
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 0) return invalid_argument("the prompt is empty");
  if (n + 1 > context_length) {
    return invalid_argument("the prompt has " + std::to_string(n) +
                            " tokens, more than the context length of " +
                            std::to_string(context_length) + " allows");
  }
  const int64_t budget = std::min<int64_t>(params.max_tokens, context_length - n);
  KvCache cache(model.config(), n + budget, model.kv_dtype());
  std::vector<float> logits(static_cast<size_t>(vocab));
  GenerateResult r;
  r.prompt_tokens = n;
  const auto t0 = clock::now();
  MX_RETURN_IF_ERROR(model.forward(prompt.data(), n, cache, false, logits.data()));
  Sampler sampler(params);
  TextStream stream(tok, params);
  r.finish_reason = "length";
  auto t_first = clock::now();
  for (int64_t step = 0; step < budget; ++step) {
    apply_logit_processors(logits.data(), vocab, params, step);
    const int32_t id = sampler.sample(logits.data(), vocab, prompt, r.token_ids);
    if (step == 0) {
      t_first = clock::now();
      r.prefill_seconds = std::chrono::duration<double>(t_first - t0).count();
    }
    r.token_ids.push_back(id);
    const TextStream::Step st = stream.push(id);
    if (on_text && !st.delta.empty()) on_text(st.delta);
    if (st.stop) {
      r.finish_reason = "stop";
      break;
    }
    if (step + 1 < budget) MX_RETURN_IF_ERROR(model.forward(&id, 1, cache, false, logits.data()));
  }
  if (r.finish_reason == "length") {
    bool stopped = false;
    const std::string rest = stream.finish(&stopped);
    if (stopped) r.finish_reason = "stop";
    if (on_text && !rest.empty()) on_text(rest);
  }
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t_first).count();
  r.text = stream.text();
  return r;
}

}  // namespace mx
