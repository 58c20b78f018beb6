#include "runtime/bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "runtime/sampler.h"

namespace mx {
namespace {

// Data-parallel attention: the batch's sequences dealt over the ranks in turn, as the engine
// balances its requests.
// Each rank's resident memory and the bytes of `what` it holds, a line each.
void rank_memory_report(const std::vector<EpRankStats>& ranks, const char* what,
                        uint64_t EpRankStats::*bytes, std::string* out) {
  char line[160];
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::snprintf(line, sizeof line,
                  "  rank %zu: RSS %.1f MB after load, %.1f MB now; its %s %.1f MB\n", i,
                  static_cast<double>(ranks[i].load_rss_bytes) / 1e6,
                  static_cast<double>(ranks[i].rss_bytes) / 1e6, what,
                  static_cast<double>(ranks[i].*bytes) / 1e6);
    *out += line;
  }
}

void spread_over_ranks(const DecoderModel& model, std::vector<SeqSlice>* slices) {
  for (size_t b = 0; b < slices->size(); ++b) {
    (*slices)[b].dp_rank = static_cast<int32_t>(b % static_cast<size_t>(model.dp_size()));
  }
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double stdev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

nlohmann::ordered_json profile_json(const ForwardProfile& p) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  const double total = p.total();
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
    const double s = p.seconds[static_cast<size_t>(i)];
    j[phase_name(static_cast<Phase>(i))] = {
        {"layer_type", phase_layer_type(static_cast<Phase>(i))},
        {"ms_per_forward", p.forwards ? 1e3 * s / static_cast<double>(p.forwards) : 0.0},
        {"share", total > 0 ? s / total : 0.0}};
  }
  return j;
}

// Per kernel: ms per forward, ms per layer of its type (the per-layer view), share.
void profile_report(const char* title, const ForwardProfile& p,
                    const std::map<std::string, int64_t>& layers, std::string* out) {
  char line[200];
  std::snprintf(line, sizeof line, "%s profile (%lld forwards):\n  %-16s %-6s %12s %10s %7s\n",
                title, static_cast<long long>(p.forwards), "kernel", "layers", "ms/forward",
                "ms/layer", "share");
  *out += line;
  const double total = p.total();
  const double fw = p.forwards ? static_cast<double>(p.forwards) : 1.0;
  double moe = 0, moe_overhead = 0, ep = 0;
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
    const Phase ph = static_cast<Phase>(i);
    const double s = p.seconds[static_cast<size_t>(i)];
    const std::string type = phase_layer_type(ph);
    if (type == "moe") moe += s;
    if (ph == Phase::kRouter || ph == Phase::kDispatch || ph == Phase::kCombine) moe_overhead += s;
    if (ph == Phase::kDispatch || ph == Phase::kCombine || ph == Phase::kEpExchange) ep += s;
    const auto n = layers.find(type);
    const double per_layer =
        n != layers.end() && n->second > 0 ? 1e3 * s / fw / static_cast<double>(n->second) : 0.0;
    std::snprintf(line, sizeof line, "  %-16s %-6s %12.4f %10.4f %6.1f%%\n", phase_name(ph),
                  type.c_str(), 1e3 * s / fw, per_layer, total > 0 ? 100 * s / total : 0.0);
    *out += line;
  }
  if (moe > 0) {
    std::snprintf(line, sizeof line, "  router + dispatch + combine: %.1f%% of MoE time\n",
                  100 * moe_overhead / moe);
    *out += line;
    const double skew = p.seconds[static_cast<size_t>(Phase::kEpSkew)];
    if (p.seconds[static_cast<size_t>(Phase::kEpExchange)] > 0) {
      std::snprintf(line, sizeof line,
                    "  expert parallelism: dispatch + combine (their exchange included) %.1f%% "
                    "of MoE time; waiting for the other ranks' experts %.1f%%\n",
                    100 * ep / moe, 100 * skew / moe);
      *out += line;
    }
  }
}

// Bytes this rank sent in a phase, per step and per token.
void dispatch_report(const char* title, const DispatchStats& d, double steps, double tokens,
                     std::string* out) {
  const double rows = static_cast<double>(d.rows_sent);
  const double all = static_cast<double>(d.row_bytes_sent + d.meta_bytes_sent +
                                         d.combine_bytes_sent + d.gather_bytes_sent);
  char line[260];
  std::snprintf(line, sizeof line,
                "  %s: %.1f KB sent per step, %.1f KB per token; dispatch %.1f bytes per routed "
                "row, combine %.1f; %llu low-latency and %llu normal layer passes, %llu steps "
                "fell back\n",
                title, all / steps / 1e3, all / tokens / 1e3,
                rows > 0 ? static_cast<double>(d.row_bytes_sent) / rows : 0.0,
                rows > 0 ? static_cast<double>(d.combine_bytes_sent) / rows : 0.0,
                static_cast<unsigned long long>(d.low_latency_layers),
                static_cast<unsigned long long>(d.normal_layers),
                static_cast<unsigned long long>(d.fallback_steps));
  *out += line;
}

nlohmann::ordered_json dispatch_json(const DispatchStats& d, double steps, double tokens) {
  const double all = static_cast<double>(d.row_bytes_sent + d.meta_bytes_sent +
                                         d.combine_bytes_sent + d.gather_bytes_sent);
  const double rows = static_cast<double>(d.rows_sent);
  return {{"bytes_per_step", all / steps},
          {"bytes_per_token", all / tokens},
          {"dispatch_bytes_per_routed_row",
           rows > 0 ? static_cast<double>(d.row_bytes_sent) / rows : 0.0},
          {"combine_bytes_per_routed_row",
           rows > 0 ? static_cast<double>(d.combine_bytes_sent) / rows : 0.0},
          {"low_latency_layers", d.low_latency_layers},
          {"normal_layers", d.normal_layers},
          {"fallback_steps", d.fallback_steps}};
}

}  // namespace

namespace {
// *sum += after - before, field by field.
void accumulate(const DispatchStats& after, const DispatchStats& before, DispatchStats* sum) {
  sum->rows_sent += after.rows_sent - before.rows_sent;
  sum->row_bytes_sent += after.row_bytes_sent - before.row_bytes_sent;
  sum->meta_bytes_sent += after.meta_bytes_sent - before.meta_bytes_sent;
  sum->combine_bytes_sent += after.combine_bytes_sent - before.combine_bytes_sent;
  sum->gather_bytes_sent += after.gather_bytes_sent - before.gather_bytes_sent;
  sum->low_latency_layers += after.low_latency_layers - before.low_latency_layers;
  sum->normal_layers += after.normal_layers - before.normal_layers;
  sum->fallback_layers += after.fallback_layers - before.fallback_layers;
  sum->fallback_steps += after.fallback_steps - before.fallback_steps;
}
}  // namespace

ModelCost model_cost(const DecoderModel& m, int64_t batch, int64_t prompt, int64_t gen) {
  const ModelConfig& c = m.config();
  ModelCost cost;
  double bytes = 0, macs = 0;
  double attn_layers = 0, state_bytes = 0;
  for (const DecoderLayer& l : m.layers) {
    bytes += static_cast<double>(l.mixer_weight_bytes());
    if (l.deltanet) {
      const double nv = static_cast<double>(c.linear_num_value_heads);
      const double state = nv * static_cast<double>(c.linear_key_head_dim) *
                           static_cast<double>(c.linear_value_head_dim);
      macs += static_cast<double>(l.deltanet->qkvz->in_features()) *
                  static_cast<double>(l.deltanet->qkvz->out_features() +
                                      l.deltanet->ba->out_features()) +
              static_cast<double>(l.deltanet->out->in_features() * c.hidden_size) +
              static_cast<double>(l.deltanet->conv_w.numel()) +
              4.0 * state;  // decay, S^T k, the rank-1 update, S^T q
      // Each decode step reads and writes every sequence's recurrent state once.
      state_bytes += 2.0 * 4.0 * (state + static_cast<double>(l.deltanet->conv_w.numel()));
    } else {
      attn_layers += 1;
      macs += static_cast<double>(c.hidden_size) *
              static_cast<double>(l.attn.qkv->out_features() + c.num_heads * c.head_dim);
    }
    if (l.mlp) {
      bytes += static_cast<double>(l.mlp->gate_up->weight_bytes() + l.mlp->down->weight_bytes());
      macs += 3.0 * static_cast<double>(c.hidden_size) *
              static_cast<double>(l.mlp->down->in_features());
    }
    if (l.moe) {
      const double e = static_cast<double>(l.moe->experts->num_experts());
      const double k = static_cast<double>(l.moe->top_k);
      // Experts a batch touches on average under uniform routing.
      const double touched = e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(batch)));
      bytes += static_cast<double>(l.moe->router->weight_bytes()) +
               touched * static_cast<double>(l.moe->experts->weight_bytes()) / e;
      macs += static_cast<double>(c.hidden_size) *
              (e + k * 3.0 * static_cast<double>(l.moe->experts->inter()));
      if (l.moe->shared) {
        bytes += static_cast<double>(l.moe->shared->gate_up->weight_bytes() +
                                     l.moe->shared->down->weight_bytes() +
                                     l.moe->shared_gate->weight_bytes());
        macs += static_cast<double>(c.hidden_size) *
                (1.0 + 3.0 * static_cast<double>(l.moe->shared->down->in_features()));
      }
    }
  }
  const double head_bytes = static_cast<double>(m.lm_head->weight_bytes());
  const double head_macs = static_cast<double>(c.vocab_size * c.hidden_size);
  // Keys and values read at the mean decode context, per sequence.
  const double ctx = static_cast<double>(prompt) + static_cast<double>(gen) / 2;
  const double kv_elem = kv_element_bytes(m.kv_dtype(), c.head_dim);
  const double kv = 2.0 * attn_layers * static_cast<double>(c.num_kv_heads * c.head_dim) * kv_elem *
                    ctx * static_cast<double>(batch);
  cost.decode_bytes_per_step = bytes + head_bytes + kv + state_bytes * static_cast<double>(batch);
  // Prefill: every linear per token, lm_head once per prompt, attention over the mean
  // causal context (QK and PV).
  const double attn_macs = 2.0 * attn_layers * static_cast<double>(c.num_heads * c.head_dim) *
                           (static_cast<double>(prompt) + 1) / 2;
  cost.prefill_flops_per_token = 2.0 * (macs + attn_macs + head_macs / static_cast<double>(prompt));
  return cost;
}

double BenchResult::decode_bandwidth_gbs() const {
  return decode_bandwidth_samples.empty() ? peaks.bandwidth_gbs
                                          : median_of(decode_bandwidth_samples);
}

double BenchResult::decode_roofline_frac() const {
  // Steps per second the bandwidth allows, times the tokens of a step.
  const double bound = decode_bandwidth_gbs() * 1e9 / cost.decode_bytes_per_step *
                       static_cast<double>(options.batch);
  return bound > 0 ? mean(decode_tok_s) / bound : 0;
}

double BenchResult::prefill_roofline_frac() const {
  const double bound = peaks.bf16_gflops * 1e9 / cost.prefill_flops_per_token;
  return bound > 0 ? mean(prefill_tok_s) / bound : 0;
}

Result<BenchResult> run_bench(DecoderModel& model, const BenchOptions& opt) {
  if (opt.prompt < 1 || opt.gen < 1 || opt.batch < 1 || opt.reps < 1) {
    return invalid_argument("-p, -n, --batch and -r must be at least 1");
  }
  const ModelConfig& c = model.config();
  if (opt.prompt > c.max_position_embeddings || opt.gen > c.max_position_embeddings - opt.prompt) {
    return invalid_argument("-p + -n (" + std::to_string(opt.prompt) + " + " +
                            std::to_string(opt.gen) + ") exceeds the context length of " +
                            std::to_string(c.max_position_embeddings));
  }
  // The run's KV cache (in doubles: no product can wrap) must fit in memory; a --batch too
  // large is refused here rather than ending in the allocator.
  double attention_layers = 0;
  for (LayerKind k : c.layer_kinds) attention_layers += k == LayerKind::kFullAttention ? 1 : 0;
  const double kv_bytes =
      2.0 * attention_layers * static_cast<double>(c.num_kv_heads * c.head_dim) *
          static_cast<double>(opt.prompt + opt.gen + 15) * static_cast<double>(opt.batch) *
          kv_element_bytes(model.kv_dtype(), c.head_dim) +
      static_cast<double>(PagedKv(c, 0, 16, model.kv_dtype(), 1).slot_bytes()) *
          static_cast<double>(opt.batch);
  const double memory =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (kv_bytes > memory / 2) {
    char msg[200];
    std::snprintf(msg, sizeof(msg),
                  "--batch %lld of %lld tokens needs %.0f MiB of KV cache, more than half of this "
                  "machine's %.0f MiB",
                  static_cast<long long>(opt.batch), static_cast<long long>(opt.prompt + opt.gen),
                  kv_bytes / 1048576, memory / 1048576);
    return invalid_argument(msg);
  }
  BenchResult r;
  r.options = opt;
  r.weight_bytes = model.weight_bytes();
  r.kv_bytes = static_cast<uint64_t>(kv_bytes);
  r.load_rss = resident_bytes();
  r.load_huge_pages = huge_page_resident_bytes();
  r.ep_size = model.dispatcher().ep_size();
  r.tp_size = model.tp_comm != nullptr ? model.tp_comm->size() : 1;
  r.layers["all"] = c.num_layers;
  r.layers["head"] = 1;
  for (const DecoderLayer& l : model.layers) {
    ++r.layers[l.moe ? "moe" : "dense"];
    if (l.deltanet) ++r.layers["linear"];
  }
  // The bandwidth probe's 512 MiB belongs to the measurement, not to the model: the peak is
  // the load's and the run's, with the probe's left out.
  const uint64_t load_peak = peak_resident_bytes();
  r.peaks = measure_machine_peaks(model.pool());
  r.peak_includes_probe = !reset_peak_resident();
  // Mapped from here on, so that the resident set it adds is the same at every moment of the
  // peak taken below, and comes off it exactly. 256 MiB: eight times the largest L3 here.
  BandwidthProbe probe(model.pool(), (size_t{256} << 20) / kProbeShrink);
  constexpr int64_t kProbeEvery = 4;  // decode steps per sample
  r.cost = model_cost(model, opt.batch, opt.prompt, opt.gen);
  auto stats = [&]() -> Result<DispatchStats> {
    if (opt.ep_stats) return opt.ep_stats();
    return model.dispatcher().stats();
  };
  const int32_t bs = 16;
  const int64_t per_seq = (opt.prompt + opt.gen + bs - 1) / bs;
  PagedKv kv(c, static_cast<int32_t>(opt.batch * per_seq), bs, model.kv_dtype(),
             static_cast<int32_t>(opt.batch));
  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(opt.batch));
  std::vector<std::vector<int32_t>> tables(seqs.size());
  for (size_t b = 0; b < seqs.size(); ++b) {
    seqs[b].resize(static_cast<size_t>(opt.prompt + opt.gen));
    for (int64_t i = 0; i < opt.prompt; ++i) seqs[b][static_cast<size_t>(i)] = tok(rng);
    tables[b].resize(static_cast<size_t>(per_seq));
    std::iota(tables[b].begin(), tables[b].end(), static_cast<int32_t>(b * per_seq));
  }
  std::vector<float> logits(static_cast<size_t>(opt.batch * c.vocab_size));
  using Clock = std::chrono::steady_clock;
  // One untimed prefill first, as llama-bench warms up: the first pass after load faults in
  // the prompt's embedding rows (from disk when the page cache has dropped the checkpoint,
  // up to a second here) and the pages of the workspace, which a server pays once. Decode
  // reads a row anywhere in the table per token: the whole table is read in here too (left
  // to the load's read-ahead, a cold cache cost 1.4 ms of a 25 ms step).
  model.embed.table.touch_mapped_pages();
  {
    std::vector<SeqSlice> warm;
    for (size_t b = 0; b < seqs.size(); ++b) {
      warm.push_back({seqs[b].data(), opt.prompt, 0, tables[b].data(), SeqSlice::Logits::kLast,
                      static_cast<int32_t>(b)});
    }
    spread_over_ranks(model, &warm);
    MX_RETURN_IF_ERROR(model.forward_batch(warm, kv, logits.data()));
  }
  for (int64_t rep = 0; rep < opt.reps; ++rep) {
    std::vector<SeqSlice> prefill;
    for (size_t b = 0; b < seqs.size(); ++b) {
      prefill.push_back({seqs[b].data(), opt.prompt, 0, tables[b].data(), SeqSlice::Logits::kLast,
                         static_cast<int32_t>(b)});
    }
    spread_over_ranks(model, &prefill);
    model.set_profile(opt.profile ? &r.prefill_profile : nullptr);
    MX_ASSIGN_OR_RETURN(DispatchStats before, stats());
    auto t0 = Clock::now();
    MX_RETURN_IF_ERROR(model.forward_batch(prefill, kv, logits.data()));
    const double tp = std::chrono::duration<double>(Clock::now() - t0).count();
    MX_ASSIGN_OR_RETURN(DispatchStats after, stats());
    accumulate(after, before, &r.prefill_dispatch);
    before = after;
    r.prefill_tok_s.push_back(static_cast<double>(opt.batch * opt.prompt) / tp);
    model.set_profile(opt.profile ? &r.decode_profile : nullptr);
    double td = 0;
    for (int64_t step = 0; step < opt.gen; ++step) {
      t0 = Clock::now();
      std::vector<SeqSlice> slices;
      for (size_t b = 0; b < seqs.size(); ++b) {
        // Greedy: the next token is the argmax of the previous step's logits.
        const float* row = logits.data() + b * static_cast<size_t>(c.vocab_size);
        seqs[b][static_cast<size_t>(opt.prompt + step)] =
            static_cast<int32_t>(argmax(row, c.vocab_size));
        slices.push_back({seqs[b].data() + opt.prompt + step, 1, opt.prompt + step,
                          tables[b].data(), SeqSlice::Logits::kLast, static_cast<int32_t>(b)});
      }
      spread_over_ranks(model, &slices);
      MX_RETURN_IF_ERROR(model.forward_batch(slices, kv, logits.data()));
      td += std::chrono::duration<double>(Clock::now() - t0).count();
      if (probe.ok() && step % kProbeEvery == kProbeEvery - 1) {
        r.decode_bandwidth_samples.push_back(probe.sample());
      }
    }
    MX_ASSIGN_OR_RETURN(after, stats());
    accumulate(after, before, &r.decode_dispatch);
    r.decode_tok_s.push_back(static_cast<double>(opt.batch * opt.gen) / td);
  }
  model.set_profile(nullptr);
  const uint64_t peak = peak_resident_bytes(), probe_bytes = probe.ok() ? probe.bytes() : 0;
  r.peak_rss = std::max(load_peak, peak > probe_bytes ? peak - probe_bytes : 0);
  // The roofline's bandwidth spans the run: samples after it too, the median of all.
  sample_read_bandwidth(model.pool(), 3, &r.peaks);
  return r;
}

double BenchResult::peak_rss_ratio() const {
  const double need = static_cast<double>(weight_bytes + kv_bytes);
  return need > 0 ? static_cast<double>(peak_rss) / need : 0;
}

nlohmann::ordered_json BenchResult::to_json() const {
  nlohmann::ordered_json j = {{"prompt_tokens", options.prompt},
                              {"gen_tokens", options.gen},
                              {"batch", options.batch},
                              {"reps", options.reps},
                              {"prefill_tok_s", mean(prefill_tok_s)},
                              {"prefill_tok_s_std", stdev(prefill_tok_s)},
                              {"decode_tok_s", mean(decode_tok_s)},
                              {"decode_tok_s_std", stdev(decode_tok_s)},
                              {"bandwidth_gbs", peaks.bandwidth_gbs},
                              {"bandwidth_samples_gbs", peaks.bandwidth_samples},
                              {"peak_fp32_gflops", peaks.fp32_gflops},
                              {"peak_bf16_gflops", peaks.bf16_gflops},
                              {"peak_int8_gops", peaks.int8_gops},
                              {"peak_int16_gops", peaks.int16_gops},
                              {"bf16_peak_how", peaks.bf16_how},
                              {"int8_peak_how", peaks.int8_how},
                              {"decode_bytes_per_step", cost.decode_bytes_per_step},
                              {"prefill_flops_per_token", cost.prefill_flops_per_token},
                              {"decode_bandwidth_gbs", decode_bandwidth_gbs()},
                              {"decode_bandwidth_samples_gbs", decode_bandwidth_samples},
                              {"decode_roofline_frac", decode_roofline_frac()},
                              {"prefill_roofline_frac", prefill_roofline_frac()},
                              {"weight_bytes", weight_bytes},
                              {"kv_bytes", kv_bytes},
                              {"load_rss_bytes", load_rss},
                              {"load_huge_page_bytes", load_huge_pages},
                              {"peak_rss_bytes", peak_rss},
                              {"peak_rss_ratio", peak_rss_ratio()},
                              {"peak_rss_includes_probe", peak_includes_probe}};
  if (options.profile) {
    j["profile"] = {{"prefill", profile_json(prefill_profile)},
                    {"decode", profile_json(decode_profile)}};
  }
  if (ep_size > 1) {
    const double reps = static_cast<double>(options.reps);
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const EpRankStats& r : ep_ranks)
      ranks.push_back({{"load_rss_bytes", r.load_rss_bytes},
                       {"rss_bytes", r.rss_bytes},
                       {"expert_bytes", r.expert_bytes}});
    j["expert_parallel"] = {
        {"ep_size", ep_size},
        {"prefill", dispatch_json(prefill_dispatch, reps,
                                  reps * static_cast<double>(options.batch * options.prompt))},
        {"decode", dispatch_json(decode_dispatch, reps * static_cast<double>(options.gen),
                                 reps * static_cast<double>(options.batch * options.gen))},
        {"ranks", ranks}};
  }
  if (tp_size > 1) {
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const EpRankStats& r : ep_ranks)
      ranks.push_back({{"load_rss_bytes", r.load_rss_bytes},
                       {"rss_bytes", r.rss_bytes},
                       {"weight_bytes", r.weight_bytes}});
    j["tensor_parallel"] = {{"tp_size", tp_size}, {"ranks", ranks}};
  }
  return j;
}

std::string BenchResult::report() const {
  std::string s;
  char line[320];
  const auto [lo, hi] =
      std::minmax_element(peaks.bandwidth_samples.begin(), peaks.bandwidth_samples.end());
  std::snprintf(line, sizeof line,
                "machine: %.1f GB/s read (median of %zu samples, %.1f-%.1f), %.1f GFLOP/s fp32, "
                "%.1f GFLOP/s bf16, %.1f GOP/s int8",
                peaks.bandwidth_gbs, peaks.bandwidth_samples.size(),
                lo == peaks.bandwidth_samples.end() ? 0.0 : *lo,
                hi == peaks.bandwidth_samples.end() ? 0.0 : *hi, peaks.fp32_gflops,
                peaks.bf16_gflops, peaks.int8_gops);
  s += line;
  if (peaks.int16_gops > 0) {
    std::snprintf(line, sizeof line, ", %.1f GOP/s int16", peaks.int16_gops);
    s += line;
  }
  s += "\n";
  std::snprintf(line, sizeof line,
                "prefill: %lld x %lld tokens, %.1f tok/s (sd %.1f), %.1f%% of the bf16 peak "
                "(%.3f GFLOP/token)\n",
                static_cast<long long>(options.batch), static_cast<long long>(options.prompt),
                mean(prefill_tok_s), stdev(prefill_tok_s), 100 * prefill_roofline_frac(),
                cost.prefill_flops_per_token / 1e9);
  s += line;
  std::snprintf(line, sizeof line,
                "decode:  %lld x %lld tokens, %.2f tok/s (sd %.2f), %.1f%% of the bandwidth "
                "roofline (%.1f MB/step at %.1f GB/s, the median of %zu samples between "
                "steps)\n",
                static_cast<long long>(options.batch), static_cast<long long>(options.gen),
                mean(decode_tok_s), stdev(decode_tok_s), 100 * decode_roofline_frac(),
                cost.decode_bytes_per_step / 1e6, decode_bandwidth_gbs(),
                decode_bandwidth_samples.size());
  s += line;
  std::snprintf(line, sizeof line,
                "memory:  peak RSS %.2f GB, %.2fx the weights (%.2f GB) and KV cache (%.2f GB); "
                "%.2f GB after load (%.2f GB of it on huge pages)%s\n",
                static_cast<double>(peak_rss) / 1e9, peak_rss_ratio(),
                static_cast<double>(weight_bytes) / 1e9, static_cast<double>(kv_bytes) / 1e9,
                static_cast<double>(load_rss) / 1e9, static_cast<double>(load_huge_pages) / 1e9,
                peak_includes_probe ? " (the peak includes the 512 MiB bandwidth probe)" : "");
  s += line;
  if (options.profile) {
    profile_report("prefill", prefill_profile, layers, &s);
    profile_report("decode", decode_profile, layers, &s);
  }
  if (tp_size > 1) {
    std::snprintf(line, sizeof line, "tensor parallelism: %d ranks\n", tp_size);
    s += line;
    rank_memory_report(ep_ranks, "weights", &EpRankStats::weight_bytes, &s);
  }
  if (ep_size > 1) {
    const double reps = static_cast<double>(options.reps);
    std::snprintf(line, sizeof line, "expert parallelism: %d ranks (all ranks' traffic)\n",
                  ep_size);
    s += line;
    dispatch_report("prefill", prefill_dispatch, reps,
                    reps * static_cast<double>(options.batch * options.prompt), &s);
    dispatch_report("decode", decode_dispatch, reps * static_cast<double>(options.gen),
                    reps * static_cast<double>(options.batch * options.gen), &s);
    rank_memory_report(ep_ranks, "experts", &EpRankStats::expert_bytes, &s);
  }
  return s;
}

}  // namespace mx
