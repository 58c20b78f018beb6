// Expert parallelism over real MPI ranks (run under mpirun -np N): every rank loads its share
// of the bundled model's experts and runs the golden prompts; rank 0 checks the logits
// against the same model in one process. Low latency on MX schemes: bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "comm_check.h"
#include "ep_test_util.h"
#include "mpi_main.h"
#include "parallel/comm.h"

namespace mx {
namespace {

using namespace test;  // NOLINT: the shared helpers

Comm& world() { return **mpi_world(); }

// Every rank runs the prompts on its share; rank 0 gets the logits, all get the counters.
RunResult run_ranks(LoadOptions opt, EpDispatch mode, int decode) {
  RunResult res;
  opt.threads = 1;
  opt.ep.comm = &world();
  opt.ep.mode = mode;
  auto m = load_model(moe_dir(), opt);
  if (!m.is_ok()) {
    res.error = m.status().to_string();
    return res;
  }
  run_prompts(**m, golden_prompts(), decode, &res, world().rank() == 0, &world());
  auto passes = all_gather_one(world(), static_cast<int64_t>(quant_passes(**m)));
  if (passes.is_ok()) {
    for (int64_t p : *passes) res.gmm1_passes.push_back(static_cast<uint64_t>(p));
  }
  return res;
}

RunResult run_alone(LoadOptions opt, int decode) {
  RunResult res;
  opt.threads = 1;
  auto m = load_model(moe_dir(), opt);
  if (!m.is_ok()) {
    res.error = m.status().to_string();
    return res;
  }
  run_prompts(**m, golden_prompts(), decode, &res, true);
  return res;
}

TEST(ExpertParallelMpi, EveryCollectiveDeliversWhatEachRankSent) {
  const int bad = check_collectives(world());
  auto all = all_gather_one(world(), bad);
  ASSERT_TRUE(all.is_ok());
  for (int r = 0; r < world().size(); ++r)
    EXPECT_EQ((*all)[static_cast<size_t>(r)], 0) << "rank " << r;
}

TEST(ExpertParallelMpi, LowLatencyIsBitIdenticalToOneProcess) {
  for (const char* flag : {"w8a8_mxfp8", "w4a8_mxfp4", "w4a4_mxfp4", "w4a4_mxfp4_dual"}) {
    SCOPED_TRACE(flag);
    const RunResult ep = run_ranks(scheme_options(flag), EpDispatch::kLowLatency, 4);
    EXPECT_TRUE(ep.error.empty()) << ep.error;
    for (uint64_t p : ep.gmm1_passes) EXPECT_EQ(p, 0u);
    if (world().rank() != 0) continue;
    const RunResult one = run_alone(scheme_options(flag), 4);
    ASSERT_EQ(ep.logits.size(), one.logits.size());
    EXPECT_EQ(std::memcmp(ep.logits.data(), one.logits.data(), one.logits.size() * 4), 0);
    std::printf("%s, %d ranks, low latency: max |dlogit| %.3g over %zu logits\n", flag,
                world().size(), max_abs_diff(ep.logits, one.logits), one.logits.size());
  }
}

TEST(ExpertParallelMpi, NormalModeStaysWithinBf16Rounding) {
  for (const char* flag : {"", "w8a8_mxfp8"}) {
    SCOPED_TRACE(*flag ? flag : "bf16");
    const RunResult ep = run_ranks(scheme_options(flag), EpDispatch::kNormal, 16);
    EXPECT_TRUE(ep.error.empty()) << ep.error;
    if (*flag) {
      for (uint64_t p : ep.gmm1_passes) EXPECT_GT(p, 0u);
    }
    if (world().rank() != 0) continue;
    const RunResult one = run_alone(scheme_options(flag), 16);
    ASSERT_EQ(ep.greedy.size(), one.greedy.size());
    int agree = 0, steps = 0;
    for (size_t p = 0; p < one.greedy.size(); ++p) {
      for (int64_t i = 0; i < safe_len(one.margins[p]); ++i, ++steps)
        agree += ep.greedy[p][static_cast<size_t>(i)] == one.greedy[p][static_cast<size_t>(i)];
    }
    const double d = max_top5_logprob_diff(ep.prefill, one.prefill, 4096);
    std::printf("%s, %d ranks, normal: prefill max |dlogprob| %.3g, greedy %d/%d safe steps\n",
                *flag ? flag : "bf16", world().size(), d, agree, steps);
    EXPECT_EQ(agree, steps);
    if (!*flag) {
      EXPECT_LE(d, 2e-2);
    }
  }
}

}  // namespace
}  // namespace mx

int main(int argc, char** argv) { return mx::test::run_mpi_tests(argc, argv); }
