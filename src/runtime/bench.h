// Offline speed of one model: prefill and decode tokens/s over repetitions, set against this
// machine's roofline measured in the same run. Decode is bounded by memory bandwidth (the
// weight and KV bytes one step must read), prefill by arithmetic (FLOPs per token against the
// BF16 peak); each phase reports the fraction of its bound it reaches, and optionally the
// time of every kernel of the forward pass.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "runtime/ep_runtime.h"
#include "runtime/machine_peaks.h"

namespace mx {

struct BenchOptions {
  int64_t prompt = 512;  // tokens prefilled per sequence
  int64_t gen = 128;     // tokens decoded per sequence
  int64_t batch = 1;     // sequences decoded together
  int64_t reps = 3;
  bool profile = false;
  uint64_t seed = 1;
  // Expert parallelism: every rank's counters summed (unset: this process's own).
  std::function<Result<DispatchStats>()> ep_stats;
};

// Bytes one decode step reads and FLOPs one prefill token costs, from the loaded weights.
struct ModelCost {
  double decode_bytes_per_step = 0;  // weights touched by `batch` tokens + their KV reads
  double prefill_flops_per_token = 0;
};
ModelCost model_cost(const DecoderModel& m, int64_t batch, int64_t prompt, int64_t gen);

struct BenchResult {
  BenchOptions options;
  std::vector<double> prefill_tok_s, decode_tok_s;  // one per repetition
  MachinePeaks peaks;
  // Read bandwidth sampled between decode steps (GB/s): decode's roofline is scaled by their
  // median, falling back to peaks.bandwidth_gbs when a run has too few steps for one.
  std::vector<double> decode_bandwidth_samples;
  double decode_bandwidth_gbs() const;
  ModelCost cost;
  ForwardProfile prefill_profile, decode_profile;  // summed over repetitions
  // Memory: the weights as held (packed, quantized, or mapped), the run's KV cache and
  // recurrent states, and this process's resident set after load and at its peak.
  uint64_t weight_bytes = 0, kv_bytes = 0, load_rss = 0, peak_rss = 0;
  uint64_t load_huge_pages = 0;      // of load_rss, on transparent huge pages
  bool peak_includes_probe = false;  // where the kernel would not reset the peak after it
  double peak_rss_ratio() const;
  // Layers of each type ("dense", "moe", "linear", "all"), for the per-layer view.
  std::map<std::string, int64_t> layers;
  // Expert parallelism: what all ranks sent in each phase, over all repetitions,
  // and every rank's memory (filled by the caller, which holds the communicator).
  int ep_size = 1;
  int tp_size = 1;  // tensor parallelism: ep_ranks holds every rank's memory
  DispatchStats prefill_dispatch, decode_dispatch;
  std::vector<EpRankStats> ep_ranks;
  double decode_roofline_frac() const;
  double prefill_roofline_frac() const;
  nlohmann::ordered_json to_json() const;
  std::string report() const;
};

Result<BenchResult> run_bench(DecoderModel& model, const BenchOptions& opt);

}  // namespace mx
