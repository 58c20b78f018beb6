#include "runtime/spec_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "runtime/speculative.h"

namespace mx {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Result<SpecCostResult> run_spec_cost(DecoderModel& model, const SpecCostOptions& opt) {
  const ModelConfig& c = model.config();
  if (opt.max_k < 1 || opt.max_k > kMaxDraftTokens) {
    return invalid_argument("the cost curve covers K = 1.." + std::to_string(kMaxDraftTokens));
  }
  if (opt.context < 1 || opt.context + opt.max_k + 1 > c.max_position_embeddings) {
    return invalid_argument("a context of " + std::to_string(opt.context) +
                            " positions and the guesses do not fit the model's " +
                            std::to_string(c.max_position_embeddings));
  }
  const int max_rows = opt.max_k + 1;
  KvCache cache(c, opt.context + max_rows, model.kv_dtype());
  cache.paged().reserve_state_steps(max_rows);
  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(opt.context + max_rows));
  for (int32_t& t : tokens) t = tok(rng);
  std::vector<float> logits(static_cast<size_t>(max_rows * c.vocab_size));
  MX_RETURN_IF_ERROR(model.forward(tokens.data(), opt.context, cache, false, logits.data()));
  const int32_t block = 0;
  // Every width at the same position: the cache's length stays at the context, and what a
  // pass writes past it is overwritten by the next.
  auto pass = [&](int rows) -> Result<double> {
    SeqSlice s;
    s.tokens = tokens.data() + opt.context;
    s.count = rows;
    s.start = opt.context;
    s.blocks = &block;
    s.logits = rows > 1 ? SeqSlice::Logits::kAll : SeqSlice::Logits::kLast;
    s.keep_states = rows > 1;
    const auto t0 = std::chrono::steady_clock::now();
    MX_RETURN_IF_ERROR(
        model.forward_batch(std::span<const SeqSlice>(&s, 1), cache.paged(), logits.data()));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int rows = 1; rows <= max_rows; ++rows) MX_RETURN_IF_ERROR(pass(rows).status());
  SpecCostResult r;
  r.options = opt;
  if (opt.profile) r.profiles.resize(static_cast<size_t>(max_rows + 1));
  std::vector<std::vector<double>> samples(static_cast<size_t>(max_rows + 1));
  for (int rep = 0; rep < opt.reps; ++rep) {
    for (int rows = 1; rows <= max_rows; ++rows) {
      if (opt.profile) model.set_profile(&r.profiles[static_cast<size_t>(rows)]);
      MX_ASSIGN_OR_RETURN(const double s, pass(rows));
      samples[static_cast<size_t>(rows)].push_back(s);
    }
  }
  model.set_profile(nullptr);
  r.seconds.assign(static_cast<size_t>(max_rows + 1), 0.0);
  for (int rows = 1; rows <= max_rows; ++rows)
    r.seconds[static_cast<size_t>(rows)] = median(samples[static_cast<size_t>(rows)]);
  return r;
}

nlohmann::ordered_json SpecCostResult::to_json() const {
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (int k = 1; k <= options.max_k; ++k) {
    nlohmann::ordered_json speedup;
    for (double a : kAcceptance)
      speedup[std::to_string(a).substr(0, 3)] = DraftPolicy::expected_tokens(k, a) / ratio(k);
    steps.push_back({{"k", k},
                     {"verify_ms", 1e3 * seconds[static_cast<size_t>(k + 1)]},
                     {"ratio", ratio(k)},
                     {"speedup", speedup}});
  }
  nlohmann::ordered_json chosen;
  for (double a : kAcceptance)
    chosen[std::to_string(a).substr(0, 3)] = DraftPolicy::best_k(seconds, a, options.max_k);
  return {{"context", options.context},
          {"decode_ms", 1e3 * seconds[1]},
          {"verify", steps},
          {"chosen_k", chosen}};
}

std::string SpecCostResult::report() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "speculative cost at a context of %lld: decode step %.3f ms\n"
                "  %-3s %10s %8s   speedup at acceptance %.1f / %.1f / %.1f\n",
                static_cast<long long>(options.context), 1e3 * seconds[1], "K", "verify ms",
                "x decode", kAcceptance[0], kAcceptance[1], kAcceptance[2]);
  out += line;
  for (int k = 1; k <= options.max_k; ++k) {
    std::snprintf(line, sizeof line, "  %-3d %10.3f %8.2f   %.2f / %.2f / %.2f\n", k,
                  1e3 * seconds[static_cast<size_t>(k + 1)], ratio(k),
                  DraftPolicy::expected_tokens(k, kAcceptance[0]) / ratio(k),
                  DraftPolicy::expected_tokens(k, kAcceptance[1]) / ratio(k),
                  DraftPolicy::expected_tokens(k, kAcceptance[2]) / ratio(k));
    out += line;
  }
  std::snprintf(line, sizeof line, "  the adaptive K chooses %d / %d / %d (0: no drafting)\n",
                DraftPolicy::best_k(seconds, kAcceptance[0], options.max_k),
                DraftPolicy::best_k(seconds, kAcceptance[1], options.max_k),
                DraftPolicy::best_k(seconds, kAcceptance[2], options.max_k));
  out += line;
  if (profiles.empty()) return out;
  // Where the extra rows' time goes: ms per forward by phase, for 1, 5 and max_k + 1 rows.
  const int widths[3] = {1, std::min(5, options.max_k + 1), options.max_k + 1};
  std::snprintf(line, sizeof line, "  %-16s %9s %9s %9s   (ms per forward, by rows)\n", "phase",
                ("x" + std::to_string(widths[0])).c_str(),
                ("x" + std::to_string(widths[1])).c_str(),
                ("x" + std::to_string(widths[2])).c_str());
  out += line;
  for (int ph = 0; ph < static_cast<int>(Phase::kCount); ++ph) {
    double ms[3];
    for (int i = 0; i < 3; ++i) {
      const ForwardProfile& p = profiles[static_cast<size_t>(widths[i])];
      ms[i] = p.forwards
                  ? 1e3 * p.seconds[static_cast<size_t>(ph)] / static_cast<double>(p.forwards)
                  : 0;
    }
    if (ms[2] <= 0) continue;
    std::snprintf(line, sizeof line, "  %-16s %9.4f %9.4f %9.4f\n",
                  phase_name(static_cast<Phase>(ph)), ms[0], ms[1], ms[2]);
    out += line;
  }
  return out;
}

Result<SpecGainResult> run_spec_gain(DecoderModel& model, const Tokenizer& tok,
                                     const SpecGainOptions& opt) {
  if (opt.prompt.empty()) return invalid_argument("the prompt is empty");
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = opt.max_tokens;
  p.ignore_eos = true;
  const int64_t ctx = model.config().max_position_embeddings;
  GenerateOptions spec;
  spec.spec = opt.spec;
  spec.drafter = opt.drafter;
  SpecGainResult r;
  r.options = opt;
  std::vector<int32_t> first;
  // Plain and speculative in turn, so that the machine's drift falls on both alike.
  for (int rep = 0; rep < opt.reps; ++rep) {
    MX_ASSIGN_OR_RETURN(GenerateResult a, generate(model, tok, opt.prompt, p, ctx));
    MX_ASSIGN_OR_RETURN(GenerateResult b, generate(model, tok, opt.prompt, p, ctx, {}, spec));
    if (first.empty()) first = a.token_ids;
    r.identical = r.identical && a.token_ids == first && b.token_ids == first;
    r.plain_tok_s.push_back(a.decode_tok_s());
    r.spec_tok_s.push_back(b.decode_tok_s());
    r.stats = b.spec;
  }
  return r;
}

double SpecGainResult::ratio() const {
  const double plain = median(plain_tok_s);
  return plain > 0 ? median(spec_tok_s) / plain : 0;
}

nlohmann::ordered_json SpecGainResult::to_json() const {
  return {{"algorithm", spec_algorithm_name(options.spec.algorithm)},
          {"num_draft_tokens", options.spec.num_draft_tokens},
          {"prompt_tokens", options.prompt.size()},
          {"gen_tokens", options.max_tokens},
          {"plain_decode_tok_s", plain_tok_s},
          {"spec_decode_tok_s", spec_tok_s},
          {"speedup", ratio()},
          {"identical", identical},
          {"acceptance_rate", stats.acceptance_rate()},
          {"mean_accepted_length", stats.mean_accepted_length()},
          {"draft_s", stats.draft_seconds},
          {"verify_s", stats.verify_seconds}};
}

std::string SpecGainResult::report() const {
  char line[512];
  std::snprintf(line, sizeof line,
                "speculative %s (K <= %d), %zu prompt tokens, %d generated, greedy:\n"
                "  decode %.1f tok/s plain, %.1f tok/s speculative (medians of %zu): %.2fx\n"
                "  acceptance %.0f%%, %.2f tokens per verify step; outputs %s\n",
                spec_algorithm_name(options.spec.algorithm), options.spec.num_draft_tokens,
                options.prompt.size(), options.max_tokens, median(plain_tok_s), median(spec_tok_s),
                plain_tok_s.size(), ratio(), 100 * stats.acceptance_rate(),
                stats.mean_accepted_length(), identical ? "identical" : "DIFFER");
  return line;
}

}  // namespace mx
