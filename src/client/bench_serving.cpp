#include "client/bench_serving.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

namespace mx {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

nlohmann::json stats_json(const LatencyStats& s) {
  return {{"mean_ms", s.mean * 1e3},
          {"median_ms", s.median * 1e3},
          {"p99_ms", s.p99 * 1e3},
          {"std_ms", s.std * 1e3}};
}

}  // namespace

LatencyStats LatencyStats::of(std::vector<double> v) {
  LatencyStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(var / n);
  s.median = percentile(v, 0.5);
  s.p99 = percentile(v, 0.99);
  return s;
}

Result<BenchServingResult> bench_serving(const BenchServingOptions& opt) {
  if (opt.num_prompts < 1 || opt.input_len < 1 || opt.output_len < 1) {
    return invalid_argument("--num-prompts, --input-len and --output-len must be at least 1");
  }
  if (!(opt.request_rate > 0)) return invalid_argument("--request-rate must be positive or inf");
  std::string model = opt.model;
  if (model.empty()) {
    MX_ASSIGN_OR_RETURN(model, first_model_id(opt.endpoint));
  }

  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<int> byte_token(0, 255);
  std::exponential_distribution<double> gap(std::isinf(opt.request_rate) ? 1.0 : opt.request_rate);
  std::vector<nlohmann::json> bodies(static_cast<size_t>(opt.num_prompts));
  std::vector<double> send_at(bodies.size(), 0.0);
  double t = 0;
  for (size_t i = 0; i < bodies.size(); ++i) {
    std::vector<int> ids(static_cast<size_t>(opt.input_len));
    for (int& id : ids) id = byte_token(rng);
    bodies[i] = {{"model", model},
                 {"prompt", ids},
                 {"max_tokens", opt.output_len},
                 {"temperature", 0.0},
                 {"ignore_eos", true}};
    if (!std::isinf(opt.request_rate)) t += gap(rng);
    send_at[i] = t;
  }
  if (opt.warmup) {
    nlohmann::json w = bodies[0];
    w["max_tokens"] = std::min(opt.output_len, 4);
    const StreamedCompletion r = stream_completion(opt.endpoint, w);
    if (!r.ok) return io_error("the warm-up request failed: " + r.error);
  }

  std::vector<StreamedCompletion> out(bodies.size());
  std::atomic<size_t> next{0};
  const size_t workers = opt.max_concurrency > 0
                             ? std::min(bodies.size(), static_cast<size_t>(opt.max_concurrency))
                             : bodies.size();
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < bodies.size();) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(send_at[i])));
        out[i] = stream_completion(opt.endpoint, bodies[i]);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  BenchServingResult r;
  r.duration = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, tpot, itl, e2e;
  for (const StreamedCompletion& c : out) {
    if (!c.ok) {
      ++r.failed;
      r.errors.push_back(c.error);
      continue;
    }
    ++r.completed;
    r.total_input += c.prompt_tokens;
    r.total_output += c.completion_tokens;
    ttft.push_back(c.ttft);
    e2e.push_back(c.latency);
    itl.insert(itl.end(), c.itl.begin(), c.itl.end());
    if (c.completion_tokens > 1) {
      tpot.push_back((c.latency - c.ttft) / static_cast<double>(c.completion_tokens - 1));
    }
  }
  r.ttft = LatencyStats::of(ttft);
  r.tpot = LatencyStats::of(tpot);
  r.itl = LatencyStats::of(itl);
  r.e2e = LatencyStats::of(e2e);
  r.request_throughput = r.completed / r.duration;
  r.input_throughput = static_cast<double>(r.total_input) / r.duration;
  r.output_throughput = static_cast<double>(r.total_output) / r.duration;
  r.concurrency = std::accumulate(e2e.begin(), e2e.end(), 0.0) / r.duration;
  return r;
}

namespace {

// Per turn index: the TTFTs and prompt lengths of the conversations that got that far.
MultiTurnResult by_turn(const std::vector<std::vector<StreamedCompletion>>& out) {
  MultiTurnResult r;
  const size_t convs = out.size(), turns = out.empty() ? 0 : out[0].size();
  for (size_t t = 0; t < turns; ++t) {
    std::vector<double> ttft;
    double prompt = 0;
    for (size_t c = 0; c < convs; ++c) {
      const StreamedCompletion& x = out[c][t];
      if (!x.ok) {
        ++r.failed;
        if (!x.error.empty()) r.errors.push_back(x.error);
        continue;
      }
      ++r.completed;
      ttft.push_back(x.ttft);
      prompt += static_cast<double>(x.prompt_tokens);
    }
    r.mean_prompt_tokens.push_back(ttft.empty() ? 0 : prompt / static_cast<double>(ttft.size()));
    r.ttft.push_back(LatencyStats::of(ttft));
  }
  return r;
}

}  // namespace

Result<MultiTurnResult> bench_multi_turn(const BenchServingOptions& opt) {
  if (opt.num_prompts < 1 || opt.multi_turn < 1 || opt.system_len < 0 || opt.turn_len < 1 ||
      opt.output_len < 1) {
    return invalid_argument(
        "--num-prompts, --multi-turn, --turn-len and --output-len must be at least 1, "
        "--system-len at least 0");
  }
  std::string model = opt.model;
  if (model.empty()) {
    MX_ASSIGN_OR_RETURN(model, first_model_id(opt.endpoint));
  }
  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<int> byte_token(0, 255);
  auto fresh = [&](std::mt19937_64& g, int n) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int& id : ids) id = byte_token(g);
    return ids;
  };
  const std::vector<int> system = fresh(rng, opt.system_len);
  auto body = [&](const std::vector<int>& prompt, int max_tokens) {
    return nlohmann::json{{"model", model},
                          {"prompt", prompt},
                          {"max_tokens", max_tokens},
                          {"temperature", 0.0},
                          {"ignore_eos", true}};
  };
  if (opt.warmup) {
    // Tokens of its own, so that it caches nothing the conversations could reuse.
    const StreamedCompletion r = stream_completion(
        opt.endpoint, body(fresh(rng, opt.turn_len), std::min(opt.output_len, 4)));
    if (!r.ok) return io_error("the warm-up request failed: " + r.error);
  }
  const size_t turns = static_cast<size_t>(opt.multi_turn);
  const size_t convs = static_cast<size_t>(opt.num_prompts);
  std::vector<std::vector<StreamedCompletion>> out(convs, std::vector<StreamedCompletion>(turns));
  std::vector<uint64_t> seeds(convs);
  for (uint64_t& sd : seeds) sd = rng();
  std::atomic<size_t> next{0};
  const size_t workers =
      opt.max_concurrency > 0 ? std::min(convs, static_cast<size_t>(opt.max_concurrency)) : convs;
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (size_t c; (c = next.fetch_add(1)) < convs;) {
        std::mt19937_64 g(seeds[c]);
        std::vector<int> history = system;
        for (size_t t = 0; t < turns; ++t) {
          const std::vector<int> user = fresh(g, opt.turn_len);
          history.insert(history.end(), user.begin(), user.end());
          StreamedCompletion& r = out[c][t];
          r = stream_completion(opt.endpoint, body(history, opt.output_len));
          if (!r.ok) break;  // the conversation ends; its later turns count as failed
          const std::vector<int> reply = fresh(g, static_cast<int>(r.completion_tokens));
          history.insert(history.end(), reply.begin(), reply.end());
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  MultiTurnResult r = by_turn(out);
  r.duration = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

nlohmann::json MultiTurnResult::to_json() const {
  nlohmann::json by_turn = nlohmann::json::array();
  for (size_t t = 0; t < ttft.size(); ++t) {
    nlohmann::json j = stats_json(ttft[t]);
    j["turn"] = t + 1;
    j["mean_prompt_tokens"] = mean_prompt_tokens[t];
    by_turn.push_back(j);
  }
  return {{"completed", completed},
          {"failed", failed},
          {"duration_s", duration},
          {"ttft_by_turn", by_turn},
          {"errors", errors}};
}

std::string MultiTurnResult::report() const {
  std::string s;
  char line[512];
  s += "============ Multi-turn Benchmark Result ============\n";
  std::snprintf(line, sizeof line, "%-40s %12d\n%-40s %12d\n%-40s %12.2f\n",
                "Successful requests:", completed, "Failed requests:", failed,
                "Benchmark duration (s):", duration);
  s += line;
  std::snprintf(line, sizeof line, "%6s %14s %16s %16s %14s\n", "Turn", "Prompt tokens",
                "Mean TTFT (ms)", "Median TTFT (ms)", "P99 TTFT (ms)");
  s += line;
  for (size_t t = 0; t < ttft.size(); ++t) {
    std::snprintf(line, sizeof line, "%6zu %14.0f %16.2f %16.2f %14.2f\n", t + 1,
                  mean_prompt_tokens[t], ttft[t].mean * 1e3, ttft[t].median * 1e3,
                  ttft[t].p99 * 1e3);
    s += line;
  }
  s += "=====================================================\n";
  for (const std::string& e : errors) s += "error: " + e + "\n";
  return s;
}

nlohmann::json BenchServingResult::to_json() const {
  return {{"completed", completed},
          {"failed", failed},
          {"duration_s", duration},
          {"total_input_tokens", total_input},
          {"total_output_tokens", total_output},
          {"request_throughput", request_throughput},
          {"input_throughput", input_throughput},
          {"output_throughput", output_throughput},
          {"total_token_throughput", input_throughput + output_throughput},
          {"concurrency", concurrency},
          {"ttft", stats_json(ttft)},
          {"tpot", stats_json(tpot)},
          {"itl", stats_json(itl)},
          {"e2e_latency", stats_json(e2e)},
          {"errors", errors}};
}

std::string BenchServingResult::report() const {
  std::string s;
  char line[128];
  auto row = [&](const char* name, double v) {
    std::snprintf(line, sizeof line, "%-40s %12.2f\n", name, v);
    s += line;
  };
  auto section = [&](const char* title) {
    std::snprintf(line, sizeof line, "%-53s\n", title);
    s += line;
  };
  auto lat = [&](const char* what, const LatencyStats& l) {
    std::string n = std::string("Mean ") + what + " (ms):";
    row(n.c_str(), l.mean * 1e3);
    n = std::string("Median ") + what + " (ms):";
    row(n.c_str(), l.median * 1e3);
    n = std::string("P99 ") + what + " (ms):";
    row(n.c_str(), l.p99 * 1e3);
  };
  section("============ Serving Benchmark Result ============");
  row("Successful requests:", completed);
  row("Failed requests:", failed);
  row("Benchmark duration (s):", duration);
  row("Total input tokens:", static_cast<double>(total_input));
  row("Total generated tokens:", static_cast<double>(total_output));
  row("Request throughput (req/s):", request_throughput);
  row("Input token throughput (tok/s):", input_throughput);
  row("Output token throughput (tok/s):", output_throughput);
  row("Total token throughput (tok/s):", input_throughput + output_throughput);
  row("Concurrency:", concurrency);
  section("----------------End-to-End Latency----------------");
  lat("E2E Latency", e2e);
  section("---------------Time to First Token----------------");
  lat("TTFT", ttft);
  section("-----Time per Output Token (excl. 1st token)------");
  lat("TPOT", tpot);
  section("---------------Inter-token Latency----------------");
  lat("ITL", itl);
  section("==================================================");
  for (const std::string& e : errors) s += "error: " + e + "\n";
  return s;
}

}  // namespace mx
