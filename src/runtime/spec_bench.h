// What speculative decoding costs and gains on the model at hand. The cost curve: a verify
// step of K guesses (K + 1 rows of one sequence, each position's recurrent state kept) against
// one decode step, at a given context, and the speedup it implies at acceptance rates 0.5, 0.7
// and 0.9. The gain: one prompt decoded greedily with and without a drafter, interleaved.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "model/profile.h"
#include "runtime/generate.h"

namespace mx {

struct SpecCostOptions {
  int64_t context = 512;  // positions already in the cache
  int max_k = 8;
  int reps = 9;  // timings per width, interleaved; the median is kept
  uint64_t seed = 1;
  bool profile = false;  // each width's time by phase of the forward pass
};

struct SpecCostResult {
  SpecCostOptions options;
  std::vector<double> seconds;           // [rows]: the median forward of 1 .. max_k + 1 rows
  std::vector<ForwardProfile> profiles;  // [rows], summed over repetitions, with profile
  double ratio(int k) const { return seconds[static_cast<size_t>(k + 1)] / seconds[1]; }
  static constexpr double kAcceptance[3] = {0.5, 0.7, 0.9};
  nlohmann::ordered_json to_json() const;
  std::string report() const;
};

Result<SpecCostResult> run_spec_cost(DecoderModel& model, const SpecCostOptions& opt);

struct SpecGainOptions {
  std::vector<int32_t> prompt;
  int max_tokens = 256;
  int reps = 3;
  SpeculativeOptions spec;
  Drafter* drafter = nullptr;  // instead of spec.algorithm's own (mtp)
};

struct SpecGainResult {
  SpecGainOptions options;
  std::vector<double> plain_tok_s, spec_tok_s;  // decode speed, one per repetition
  SpecStats stats;                              // of the last speculative repetition
  bool identical = true;                        // every repetition gave the same tokens
  double ratio() const;                         // medians
  nlohmann::ordered_json to_json() const;
  std::string report() const;
};

Result<SpecGainResult> run_spec_gain(DecoderModel& model, const Tokenizer& tok,
                                     const SpecGainOptions& opt);

}  // namespace mx
