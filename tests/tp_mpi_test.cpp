// Tensor parallelism over real MPI ranks (run under mpirun -np N): every rank loads its share
// of each layer of every fixture family (Qwen3 dense and MoE, Qwen3.5 dense and MoE, GGUF
// files of both) in BF16 and every MX scheme, and runs the golden prompts; rank 0 checks the
// logits and the greedy continuation against the same model in one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "ep_test_util.h"
#include "mpi_main.h"
#include "parallel/comm.h"

namespace mx {
namespace {

using namespace test;  // NOLINT: the shared helpers

Comm& world() { return **mpi_world(); }

std::string fixture(const std::string& name) { return shared_dir() + "/fixtures/" + name; }

// The golden prompts of a family (the first few: every layer kind sees a prefill of each
// length class, and the run stays short on oversubscribed ranks).
std::vector<std::vector<int32_t>> prompts_of(const std::string& family) {
  auto g = read_json_file(fixture(family) + "/golden/golden.json");
  std::vector<std::vector<int32_t>> out;
  if (!g.is_ok()) return out;
  for (const Json& p : (*g)["prompts"]) {
    if (out.size() == 3) break;
    out.push_back(p["input_ids"].get<std::vector<int32_t>>());
  }
  return out;
}

RunResult run(const std::string& model, const std::vector<std::vector<int32_t>>& prompts,
              LoadOptions opt, Comm* tp, bool whole_experts = false) {
  RunResult res;
  opt.threads = 1;
  opt.tp.comm = tp;
  // --ep-size equal to --tp-size: the same ranks hold whole experts.
  if (whole_experts) opt.ep.comm = tp;
  auto m = load_model(model, opt);
  if (!m.is_ok()) {
    res.error = m.status().to_string();
    return res;
  }
  run_prompts(**m, prompts, 12, &res, tp == nullptr || tp->rank() == 0, tp);
  return res;
}

struct Case {
  const char* model;     // under fixtures/
  const char* family;    // whose golden prompts it runs
  const char* scheme;    // --quantization ("": as stored)
  double bound;          // the most a top-5 log-prob may move
  bool ep = false;       // --ep-size as well: whole experts a share a rank
  int64_t rotation = 0;  // --rotation: shards must begin on its blocks
};

// Float weights and MX: the shards begin where the blocks do (or the row-parallel linear runs
// over output rows), so only the order of the partial sums differs from one process, and an
// activation code at a rounding tie that this moves. Every family in BF16 and every MX scheme,
// then the stored kinds (an offline checkpoint, GGUF files) and the variants.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* family :
       {"tiny-qwen3-dense", "tiny-qwen3-moe", "tiny-qwen3_5-dense", "tiny-qwen3_5-moe"}) {
    for (const char* scheme : {"", "w8a8_mxfp8", "w4a8_mxfp4", "w4a4_mxfp4", "w4a4_mxfp4_dual"}) {
      out.push_back({family, family, scheme, *scheme ? 1e-1 : 1e-3});
    }
  }
  const Case more[] = {
      {"tiny-qwen3_5-moe-w8a8-mxfp8", "tiny-qwen3_5-moe", "", 1e-1},
      {"gguf/tiny-qwen3-dense.Q4_K_M.gguf", "tiny-qwen3-dense", "", 1e-1},
      {"gguf/tiny-qwen3-moe-allmoe.Q8_0.gguf", "tiny-qwen3-moe", "", 1e-1},
      {"gguf/tiny-qwen3_5-moe.MXFP4_MOE.gguf", "tiny-qwen3_5-moe", "", 1e-1},
      {"gguf/tiny-qwen3_5-dense.Q4_K_M.gguf", "tiny-qwen3_5-dense", "", 1e-1},
      {"tiny-qwen3-moe", "tiny-qwen3-moe", "", 1e-3, true},
      {"tiny-qwen3_5-moe", "tiny-qwen3_5-moe", "w4a8_mxfp4", 1e-1, true},
      {"tiny-qwen3-dense", "tiny-qwen3-dense", "w4a8_mxfp4", 1e-1, false, 128},
  };
  out.insert(out.end(), std::begin(more), std::end(more));
  return out;
}

TEST(TensorParallelMpi, EveryFamilyAndSchemeMatchesOneProcess) {
  for (const Case& c : cases()) {
    const std::string name = std::string(c.model) + (*c.scheme ? " " : "") + c.scheme +
                             (c.ep ? " (ep)" : "") +
                             (c.rotation > 0 ? " block" + std::to_string(c.rotation) : "");
    SCOPED_TRACE(name);
    const auto prompts = prompts_of(c.family);
    ASSERT_FALSE(prompts.empty());
    LoadOptions opt = scheme_options(c.scheme);
    opt.rotation = c.rotation;
    const RunResult tp = run(fixture(c.model), prompts, opt, &world(), c.ep);
    ASSERT_TRUE(tp.error.empty()) << tp.error;
    if (world().rank() != 0) continue;
    const RunResult one = run(fixture(c.model), prompts, opt, nullptr);
    ASSERT_TRUE(one.error.empty()) << one.error;
    ASSERT_EQ(tp.greedy.size(), one.greedy.size());
    int agree = 0, steps = 0;
    for (size_t p = 0; p < one.greedy.size(); ++p) {
      for (int64_t i = 0; i < safe_len(one.margins[p]); ++i, ++steps)
        agree += tp.greedy[p][static_cast<size_t>(i)] == one.greedy[p][static_cast<size_t>(i)];
    }
    const double d = max_top5_logprob_diff(tp.prefill, one.prefill, 4096);
    std::printf(
        "%-44s %d ranks: prefill max |dlogprob| %.3g (bound %.3g), greedy %d/%d safe steps\n",
        name.c_str(), world().size(), d, c.bound, agree, steps);
    EXPECT_EQ(agree, steps);
    EXPECT_LE(d, c.bound);
  }
}

// A slice that wants only each row's largest logit gets, on rank 0, the whole row's largest at
// its id and -inf elsewhere, from each rank's largest instead of its share of the vocabulary.
TEST(TensorParallelMpi, TopOneRowsCarryTheWholeRowsLargestLogit) {
  LoadOptions opt;
  opt.threads = 1;
  opt.tp.comm = &world();
  auto m = load_model(fixture("tiny-qwen3-moe"), opt);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const auto prompts = prompts_of("tiny-qwen3-moe");
  const std::vector<int32_t>& p = prompts[0];
  const int64_t n = static_cast<int64_t>(p.size()), vocab = (*m)->config().vocab_size;
  std::vector<float> whole(static_cast<size_t>(n * vocab)), top(whole.size());
  for (bool top1 : {false, true}) {
    PagedKv kv((*m)->config(), 1, static_cast<int32_t>(n), KvDtype::kF32);
    const int32_t block = 0;
    SeqSlice s;
    s.tokens = p.data();
    s.count = n;
    s.blocks = &block;
    s.logits = SeqSlice::Logits::kAll;
    s.top1_logits = top1;
    ASSERT_TRUE((*m)->forward_batch({&s, 1}, kv, (top1 ? top : whole).data()).is_ok());
  }
  if (world().rank() != 0) return;
  for (int64_t r = 0; r < n; ++r) {
    const float* w = whole.data() + r * vocab;
    const float* t = top.data() + r * vocab;
    const int32_t id = argmax(w, vocab);
    EXPECT_EQ(t[id], w[id]) << "row " << r;
    EXPECT_EQ(std::count_if(t, t + vocab, [](float v) { return std::isfinite(v); }), 1);
  }
}

// The shares, against splits worked by hand: heads evenly; KV heads replicated when fewer
// than ranks; widths where blocks begin, the last share taking the ragged end.
TEST(TensorParallelMpi, SharesSplitAsStated) {
  const TpShard r1{1, 4}, r3{3, 4};
  EXPECT_EQ(r1.heads(8), (std::pair<int64_t, int64_t>{2, 4}));
  EXPECT_EQ(r1.kv_heads(2), (std::pair<int64_t, int64_t>{0, 1}));
  EXPECT_EQ(r3.kv_heads(2), (std::pair<int64_t, int64_t>{1, 2}));
  EXPECT_EQ(r3.kv_heads(8), (std::pair<int64_t, int64_t>{6, 8}));
  // 688 = 21.5 blocks of 32: 22 blocks, 5 + 6 + 5 + 6.
  EXPECT_EQ(r1.width(688, 32), (std::pair<int64_t, int64_t>{160, 352}));
  EXPECT_EQ(r3.width(688, 32), (std::pair<int64_t, int64_t>{512, 688}));
  EXPECT_FALSE(check_width_split("w", 96, 32, 4).is_ok());
  EXPECT_TRUE(check_width_split("w", 97, 32, 4).is_ok());
  ModelConfig c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  EXPECT_TRUE(check_tensor_parallel(c, 4).is_ok());
  EXPECT_FALSE(check_tensor_parallel(c, 3).is_ok());
  c.num_kv_heads = 3;
  EXPECT_FALSE(check_tensor_parallel(c, 2).is_ok());
  c.num_heads = 8;
  c.num_kv_heads = 2;
  const ModelConfig l = tp_local_config(c, r1);
  EXPECT_EQ(l.num_heads, 2);
  EXPECT_EQ(l.num_kv_heads, 1);
}

}  // namespace
}  // namespace mx

int main(int argc, char** argv) { return mx::test::run_mpi_tests(argc, argv); }
