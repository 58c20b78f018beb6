// libFuzzer target: an OpenAI request body, parsed as the server does (nlohmann::ordered_json,
// then parse_request) for both /v1/completions and /v1/chat/completions, with the bundled
// model's tokenizer and chat template. An accepted request must be one the engine can run;
// a refused one must give an error body that serializes; log-probs JSON is built for the
// prompt's tokens when asked for.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "json_mutator.h"
#include "server/openai_protocol.h"

namespace {

struct Model {
  std::shared_ptr<const mx::Tokenizer> tok;
  std::optional<mx::ChatTemplate> tmpl;
  mx::ProtocolContext ctx;
};

const Model& model() {
  static const Model* kModel = [] {
    auto* m = new Model;
    auto tok = mx::Tokenizer::load(MX_FUZZ_MODEL_DIR);
    if (!tok.is_ok()) mx::fuzz::fail("setup", tok.status().message());
    auto tmpl = mx::ChatTemplate::load(MX_FUZZ_MODEL_DIR);
    if (!tmpl.is_ok()) mx::fuzz::fail("setup", tmpl.status().message());
    m->tok = *tok;
    m->tmpl = std::move(*tmpl);
    m->ctx.tok = m->tok.get();
    m->ctx.tmpl = &*m->tmpl;
    m->ctx.stop_ids = {*m->tok->token_id("<|im_end|>"), *m->tok->token_id("<|endoftext|>")};
    m->ctx.context = 1024;  // small, so that prompt + max_tokens can overflow it
    m->ctx.served_model_name = "tiny-qwen3-moe";
    return m;
  }();
  return *kModel;
}

void check_accepted(const mx::ParsedRequest& r, bool chat, const Model& m) {
  MX_FUZZ_CHECK(!r.prompts.empty(), "no prompt accepted");
  const mx::SamplingParams& p = r.params;
  MX_FUZZ_CHECK(p.max_tokens >= 1, "max_tokens");
  for (const std::vector<int32_t>& prompt : r.prompts) {
    MX_FUZZ_CHECK(!prompt.empty(), "empty prompt accepted");
    for (int32_t id : prompt) {
      MX_FUZZ_CHECK(id >= 0 && id < m.tok->vocab_size(), std::to_string(id));
    }
    MX_FUZZ_CHECK(static_cast<int64_t>(prompt.size()) + p.max_tokens <= m.ctx.context, "context");
  }
  MX_FUZZ_CHECK(r.n >= 1 && r.n <= r.best_of && r.best_of <= mx::kMaxChoices, "n, best_of");
  MX_FUZZ_CHECK(p.min_tokens >= 0 && p.min_tokens <= p.max_tokens, "min_tokens");
  const std::vector<int32_t>& prompt0 = r.prompts[0];
  MX_FUZZ_CHECK(p.temperature >= 0 && p.temperature <= 2, "temperature");
  MX_FUZZ_CHECK(p.top_p > 0 && p.top_p <= 1, "top_p");
  MX_FUZZ_CHECK(r.top_logprobs <= (chat ? 20 : 5), "top_logprobs");
  if (r.top_logprobs < 0) return;
  // Log-probs of the prompt's first tokens, with the next ones as alternatives.
  mx::LogprobsJson lj(*m.tok, chat);
  std::vector<mx::TokenLogprob> lps;
  for (size_t i = 0; i < prompt0.size() && i < 4; ++i) {
    mx::TokenLogprob lp;
    lp.token = prompt0[i];
    lp.logprob = -static_cast<float>(i);
    for (int k = 0; k < r.top_logprobs; ++k) {
      lp.top.emplace_back(prompt0[(i + 1 + static_cast<size_t>(k)) % prompt0.size()], -1.0f);
    }
    lps.push_back(lp);
  }
  (void)lj.add(lps).dump();
  (void)lj.all().dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Model& m = model();
  mx::fuzz::guarded("openai_request", [&] {
    const mx::OJson body = mx::OJson::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) return;  // the server's 400 before parsing
    for (bool chat : {false, true}) {
      mx::ParsedRequest r;
      mx::HttpError err{400, ""};
      const bool ok = mx::parse_request(body, chat, m.ctx, &r, &err);
      mx::fuzz::report(chat ? "parse_request (chat)" : "parse_request (completions)", ok,
                       err.message);
      if (ok) {
        check_accepted(r, chat, m);
      } else {
        MX_FUZZ_CHECK(err.status == 400 || err.status == 404, err.message);
        MX_FUZZ_CHECK(!err.message.empty(), "an error without a message");
        (void)mx::error_body(err);
      }
    }
  });
  return 0;
}

MX_FUZZ_JSON_MUTATOR
