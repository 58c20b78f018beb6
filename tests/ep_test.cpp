// Expert parallelism in one process: ranks as threads joined by LocalComm, each loading only
// its share of the experts, against the same model in one process (the local dispatcher).
// Low-latency rows are the local fused format, so MX schemes agree bit for bit; BF16 rows on
// the wire (normal mode, or the BF16 scheme) stay within their rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include "comm_check.h"
#include "core/json_util.h"
#include "ep_test_util.h"
#include "formats/half.h"
#include "model/model.h"
#include "test_util.h"

namespace mx {
namespace {

using namespace test;  // NOLINT: the shared helpers

RunResult run(LoadOptions opt, int ranks, EpDispatch mode, int64_t max_tokens = 128,
              int decode = 4) {
  const auto prompts = golden_prompts();
  RunResult res;
  opt.threads = 1;
  if (ranks == 0) {
    auto m = load_model(moe_dir(), opt);
    if (!m.is_ok()) {
      res.error = m.status().to_string();
      return res;
    }
    run_prompts(**m, prompts, decode, &res, true);
    res.gmm1_passes.push_back(quant_passes(**m));
    return res;
  }
  auto comms = make_local_comms(ranks);
  std::vector<RunResult> per(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      LoadOptions o = opt;
      o.ep.comm = comms[static_cast<size_t>(r)].get();
      o.ep.mode = mode;
      o.ep.max_dispatch_tokens = max_tokens;
      auto m = load_model(moe_dir(), o);
      if (!m.is_ok()) {
        per[static_cast<size_t>(r)].error = m.status().to_string();
        return;
      }
      run_prompts(**m, prompts, decode, &per[static_cast<size_t>(r)], r == 0, o.ep.comm);
      per[static_cast<size_t>(r)].stats.push_back((*m)->dispatcher().stats());
      per[static_cast<size_t>(r)].gmm1_passes.push_back(quant_passes(**m));
    });
  }
  for (std::thread& t : threads) t.join();
  res.logits = std::move(per[0].logits);
  res.greedy = std::move(per[0].greedy);
  res.prefill = std::move(per[0].prefill);
  res.margins = std::move(per[0].margins);
  for (const RunResult& p : per) {
    if (!p.error.empty()) res.error = p.error;
    res.stats.push_back(p.stats.empty() ? DispatchStats{} : p.stats[0]);
    res.gmm1_passes.push_back(p.gmm1_passes.empty() ? 0 : p.gmm1_passes[0]);
  }
  return res;
}

TEST(ExpertParallel, LowLatencyIsBitIdenticalOnEveryMxScheme) {
  for (const char* flag : {"w8a8_mxfp8", "w4a8_mxfp4", "w4a4_mxfp4", "w4a4_mxfp4_dual"}) {
    SCOPED_TRACE(flag);
    const RunResult one = run(scheme_options(flag), 0, EpDispatch::kAuto);
    ASSERT_TRUE(one.error.empty()) << one.error;
    for (int ranks : {2, 3}) {
      const RunResult ep = run(scheme_options(flag), ranks, EpDispatch::kLowLatency);
      ASSERT_TRUE(ep.error.empty()) << ep.error;
      ASSERT_EQ(ep.logits.size(), one.logits.size());
      std::printf("%s, %d ranks, low latency: max |dlogit| %.3g\n", flag, ranks,
                  max_abs_diff(ep.logits, one.logits));
      EXPECT_EQ(std::memcmp(ep.logits.data(), one.logits.data(), one.logits.size() * 4), 0);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(ep.gmm1_passes[static_cast<size_t>(r)], 0u) << "rank " << r;
        EXPECT_GT(ep.stats[static_cast<size_t>(r)].low_latency_layers, 0u);
        EXPECT_EQ(ep.stats[static_cast<size_t>(r)].normal_layers, 0u);
      }
    }
  }
}

// The model with BF16 rows on the wire (normal mode; the BF16 scheme in any mode): what the
// rounding the dispatcher test pins down costs. The BF16 scheme stays within 2e-2 of one
// process in log-prob (the fixture README's 1e-2 contract is for FP32 activations); MX
// schemes requantize the rows (rounded to odd, so gmm1 sees one process's codes) but combine
// in BF16, and a later layer's requantization can flip a code by a whole step, so there the
// greedy tokens are held: identical wherever one process's margin is 0.05 or more (measured:
// bf16 44/44, w8a8 45/45, w4a8 12/12; w4a4 22/31, dual 45/46).
TEST(ExpertParallel, Bf16RowsOnTheWireKeepGreedyTokens) {
  const int64_t vocab = 4096;
  struct Case {
    const char* flag;
    EpDispatch mode;
  };
  for (const Case c :
       {Case{"", EpDispatch::kNormal}, Case{"", EpDispatch::kLowLatency},
        Case{"w8a8_mxfp8", EpDispatch::kNormal}, Case{"w4a8_mxfp4", EpDispatch::kNormal},
        Case{"w4a4_mxfp4", EpDispatch::kNormal}, Case{"w4a4_mxfp4_dual", EpDispatch::kNormal}}) {
    const std::string name =
        std::string(*c.flag ? c.flag : "bf16") + " " + ep_dispatch_name(c.mode);
    SCOPED_TRACE(name);
    const RunResult one = run(scheme_options(c.flag), 0, EpDispatch::kAuto, 128, 32);
    ASSERT_TRUE(one.error.empty()) << one.error;
    const RunResult ep = run(scheme_options(c.flag), 2, c.mode, 128, 32);
    ASSERT_TRUE(ep.error.empty()) << ep.error;
    ASSERT_EQ(ep.logits.size(), one.logits.size());
    ASSERT_EQ(ep.greedy.size(), one.greedy.size());
    const double d = max_top5_logprob_diff(ep.prefill, one.prefill, vocab);
    int agree = 0, steps = 0;
    for (size_t p = 0; p < one.greedy.size(); ++p) {
      const int64_t safe = safe_len(one.margins[p]);
      for (int64_t i = 0; i < safe; ++i, ++steps) {
        agree += ep.greedy[p][static_cast<size_t>(i)] == one.greedy[p][static_cast<size_t>(i)];
      }
    }
    std::printf(
        "%s, 2 ranks: prefill max |dlogprob| %.3g against one process, greedy %d/%d safe steps\n",
        name.c_str(), d, agree, steps);
    // W4A4 rounds activations to E2M1 (one mantissa bit): requantizing BF16-rounded rows
    // flips codes a full step at a time, so its normal mode is measured, not held (SGLang's
    // DeepEP sends W4A4 rows as MXFP4, low latency here).
    if (std::string(c.flag).rfind("w4a4", 0) != 0) {
      EXPECT_EQ(agree, steps);
    }
    if (!*c.flag) {
      EXPECT_LE(d, 2e-2);
    }
    if (*c.flag && c.mode == EpDispatch::kNormal) {
      for (uint64_t passes : ep.gmm1_passes) EXPECT_GT(passes, 0u) << "gmm1 quantizes on arrival";
    }
  }
}

TEST(ExpertParallel, LowLatencySendsAboutHalfTheBytesOfNormal) {
  for (const char* flag : {"w8a8_mxfp8", "w4a8_mxfp4", "w4a4_mxfp4", "w4a4_mxfp4_dual"}) {
    SCOPED_TRACE(flag);
    const RunResult ll = run(scheme_options(flag), 2, EpDispatch::kLowLatency, 128, 2);
    const RunResult nm = run(scheme_options(flag), 2, EpDispatch::kNormal, 128, 2);
    ASSERT_TRUE(ll.error.empty() && nm.error.empty()) << ll.error << nm.error;
    const DispatchStats& a = ll.stats[0];
    const DispatchStats& b = nm.stats[0];
    ASSERT_GT(a.rows_sent, 0u);
    ASSERT_GT(b.rows_sent, 0u);
    const double per_ll = static_cast<double>(a.row_bytes_sent) / static_cast<double>(a.rows_sent);
    const double per_nm = static_cast<double>(b.row_bytes_sent) / static_cast<double>(b.rows_sent);
    std::printf("%s: %.1f bytes per routed row in low latency, %.1f in normal (%.3fx)\n", flag,
                per_ll, per_nm, per_ll / per_nm);
    // hidden 256: a BF16 row is 512 bytes + the 4-byte header.
    EXPECT_EQ(per_nm, 516.0);
    EXPECT_LE(per_ll / per_nm, 0.52);
  }
}

// A low-latency step whose source rows exceed the receive slots goes in normal mode: the same
// bits as normal mode, counted.
TEST(ExpertParallel, OverCapacityFallsBackToNormalMode) {
  const LoadOptions o = scheme_options("w8a8_mxfp8");
  const RunResult small = run(o, 2, EpDispatch::kLowLatency, 2, 2);
  const RunResult normal = run(o, 2, EpDispatch::kNormal, 2, 2);
  ASSERT_TRUE(small.error.empty() && normal.error.empty());
  const DispatchStats& s = small.stats[0];
  EXPECT_GT(s.fallback_steps, 0u);
  EXPECT_EQ(s.fallback_layers, s.normal_layers);
  EXPECT_GT(s.low_latency_layers, 0u);  // the decode steps fit
  // Prefill logits (the fallback steps) equal normal mode's.
  ASSERT_EQ(small.logits.size(), normal.logits.size());
  const auto prompts = golden_prompts();
  size_t at = 0;
  for (const auto& p : prompts) {
    const size_t n = p.size() * 4096;
    EXPECT_EQ(std::memcmp(small.logits.data() + at, normal.logits.data() + at, n * 4), 0);
    at += n + 2 * 4096;
  }
}

TEST(ExpertParallel, AutoUsesNormalForPrefillAndLowLatencyForDecode) {
  const RunResult r = run(scheme_options("w8a8_mxfp8"), 2, EpDispatch::kAuto, 128, 3);
  ASSERT_TRUE(r.error.empty()) << r.error;
  const auto prompts = golden_prompts();
  const uint64_t moe_layers = 3;  // layer 0 is dense
  EXPECT_EQ(r.stats[0].normal_layers, prompts.size() * moe_layers);
  EXPECT_EQ(r.stats[0].low_latency_layers, prompts.size() * 3 * moe_layers);
  EXPECT_EQ(r.stats[0].fallback_layers, 0u);
}

TEST(ExpertParallel, MoreRanksThanExpertsIsRefused) {
  const RunResult r = run(LoadOptions{}, 9, EpDispatch::kAuto);
  EXPECT_NE(r.error.find("cannot be split over 9 ranks"), std::string::npos) << r.error;
}

// A bank whose expert e returns (e + 1) times its FP32 input row: what crosses the wire is
// then visible in the result.
class ScaleBank final : public ExpertBank {
 public:
  ScaleBank(int64_t first, int64_t count, int64_t hidden)
      : ExpertBank(count, hidden, 1), first_(first) {}
  std::string scheme_name() const override { return "scale"; }
  std::string kernel_table() const override { return "none"; }
  uint64_t weight_bytes() const override { return 0; }
  RowFormat input_format(DispatchMode) const override { return RowFormat::f32(); }
  void run(const ActRows& rows, const int64_t* offsets, float* out, ExecContext&,
           ExpertTimes*) const override {
    for (int64_t e = 0; e < num_experts(); ++e) {
      for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
        for (int64_t d = 0; d < hidden(); ++d) {
          out[r * hidden() + d] = static_cast<float>(first_ + e + 1) * rows.f32[r * hidden() + d];
        }
      }
    }
  }

 private:
  int64_t first_;
};

// The bound of BF16 rows on the wire, exactly: each dispatched row arrives as its BF16
// rounding and each output returns as its BF16 rounding, the weights applied at the source in
// expert order, whatever the rank count.
TEST(ExpertParallel, NormalModeRowsAreTheirBf16Rounding) {
  const int64_t rows = 13, hidden = 40, experts = 7, k = 3;
  const auto h = test::activation_like(static_cast<size_t>(rows * hidden), 5);
  const auto logits = test::activation_like(static_cast<size_t>(rows * experts), 6);
  const auto x0 = test::activation_like(static_cast<size_t>(rows * hidden), 7);
  for (int ranks : {1, 2, 3, 4}) {
    SCOPED_TRACE(ranks);
    auto comms = make_local_comms(ranks);
    std::vector<std::vector<float>> x(static_cast<size_t>(ranks), x0);
    std::vector<int32_t> ids(static_cast<size_t>(rows * k));
    std::vector<float> wts(ids.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        EpOptions o{comms[static_cast<size_t>(r)].get(), EpDispatch::kNormal, 128};
        auto disp = make_ep_dispatcher(o);
        const ExpertRange mine = expert_range(experts, r, ranks);
        ScaleBank bank(mine.first, mine.count, hidden);
        std::vector<float> probs = logits;
        std::vector<int32_t> my_ids(ids.size());
        std::vector<float> my_wts(ids.size());
        ExecContext exec(nullptr);
        MoeArgs a;
        a.exec = &exec;
        a.experts = &bank;
        a.num_experts = experts;
        a.top_k = k;
        a.norm_topk_prob = true;
        a.probs = probs.data();
        a.h = h.data();
        a.x = x[static_cast<size_t>(r)].data();
        a.rows = rows;
        a.hidden = hidden;
        a.ids = my_ids.data();
        a.wts = my_wts.data();
        disp->run(a);
        if (r == 0) {
          ids = my_ids;
          wts = my_wts;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t d = 0; d < hidden; ++d) {
        // Summed from zero in expert order, as the reference models add them.
        std::vector<int64_t> by_id(static_cast<size_t>(k));
        std::iota(by_id.begin(), by_id.end(), int64_t{0});
        std::sort(by_id.begin(), by_id.end(), [&](int64_t p, int64_t q) {
          return ids[static_cast<size_t>(t * k + p)] < ids[static_cast<size_t>(t * k + q)];
        });
        float want = 0.0f;
        for (int64_t j : by_id) {
          const float sent = round_to_bf16(h[static_cast<size_t>(t * hidden + d)]);
          const float back =
              round_to_bf16(static_cast<float>(ids[static_cast<size_t>(t * k + j)] + 1) * sent);
          want += wts[static_cast<size_t>(t * k + j)] * back;
        }
        for (int r = 0; r < ranks; ++r) {
          ASSERT_EQ(x[static_cast<size_t>(r)][static_cast<size_t>(t * hidden + d)], want)
              << "rank " << r << " token " << t << " element " << d;
        }
      }
    }
  }
}

TEST(LocalComm, EveryCollectiveDeliversWhatEachRankSent) {
  for (int ranks : {1, 2, 3, 5}) {
    auto comms = make_local_comms(ranks);
    std::vector<int> bad(static_cast<size_t>(ranks), -1);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        bad[static_cast<size_t>(r)] = check_collectives(*comms[static_cast<size_t>(r)]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < ranks; ++r)
      EXPECT_EQ(bad[static_cast<size_t>(r)], 0) << ranks << " ranks, rank " << r;
  }
}

}  // namespace
}  // namespace mx
