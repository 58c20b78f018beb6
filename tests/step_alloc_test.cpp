// A step of a warm model allocates nothing: every buffer a forward pass needs lives in the
// caller's execution context, sized by the first steps. The count comes from the allocator
// itself: this executable replaces the global operator new, and counts calls, from any thread
// (the pool's included), while a window is open.
#include <gtest/gtest.h>

#include <execinfo.h>

#include <atomic>
#include <barrier>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "parallel/comm.h"
#include "test_util.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
// MX_ALLOC_TRACE=1 prints the call stacks of the first counted allocations (addresses for
// addr2line), to find what allocated.
const bool g_trace = std::getenv("MX_ALLOC_TRACE") != nullptr;

void* counted_alloc(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed) && g_allocations.fetch_add(1) < 3 && g_trace) {
    g_counting = false;  // backtrace_symbols_fd itself does not allocate, but be safe
    void* frames[24];
    backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
    g_counting = true;
  }
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else if (posix_memalign(&p, align, n) != 0) {
    p = nullptr;
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
// Out of line, so that the compiler does not pair an inlined free with the new expressions
// whose operator new this file replaces.
__attribute__((noinline)) void counted_free(void* p) noexcept { std::free(p); }
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
// The nothrow forms too: every form that the replaced deletes may free must come from malloc
// (AddressSanitizer checks that allocation and release match).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, 0);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, 0);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, static_cast<std::size_t>(a));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n, static_cast<std::size_t>(a));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  counted_free(p);
}
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }

namespace mx {
namespace {

class Window {
 public:
  Window() {
    g_allocations = 0;
    g_counting = true;
  }
  int64_t close() {
    g_counting = false;
    return g_allocations.load();
  }
  ~Window() { g_counting = false; }
};

// What a sequence growing from about 6 to 126 positions may allocate: the attention scratch
// grows in eighths of a doubling (8 steps from 64 to 128), in each of the two threads' arenas.
// Growth on every step would be about 120 per buffer.
constexpr int64_t kGrowthBound = 24;

struct Case {
  std::string model;
  LoadOptions options;
};

std::string fixture(const std::string& name) { return test::shared_dir() + "/fixtures/" + name; }

// Allocations while `prompt` runs and then `steps` decode steps follow it on a fresh cache,
// the first `uncounted` steps (prompt included) left out, none counted when it is negative:
// the context grows by a token each step, as in generation.
int64_t count_sequence(DecoderModel& m, const std::vector<int32_t>& prompt, int steps,
                       int uncounted, KvDtype kv_dtype) {
  KvCache cache(m.config(), 160, kv_dtype);
  std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
  int32_t next = 11;
  std::optional<Window> w;
  if (uncounted == 0) w.emplace();
  bool ok =
      m.forward(prompt.data(), static_cast<int64_t>(prompt.size()), cache, false, logits.data())
          .is_ok();
  for (int s = 0; ok && s < steps; ++s) {
    if (s + 1 == uncounted) w.emplace();
    ok = m.forward(&next, 1, cache, false, logits.data()).is_ok();
    next = static_cast<int32_t>((next * 31 + s) % 1000);
  }
  const int64_t counted = w ? w->close() : 0;
  EXPECT_TRUE(ok);
  EXPECT_EQ(cache.length(), static_cast<int64_t>(prompt.size()) + steps);
  return counted;
}

// Once the first pass and steps have sized the buffers, the first sequence resizes the
// context's buffers as it grows a few times per doubling of its length, not on every step
// (which would be about kSteps); a second sequence as long, prompt included, then allocates
// nothing at all.
void expect_no_step_allocations(const Case& c) {
  LoadOptions opt = c.options;
  opt.threads = 2;
  auto model = load_model(c.model, opt);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const std::vector<int32_t> prompt = {100, 107, 114};
  constexpr int kSteps = 124;
  const int64_t first = count_sequence(**model, prompt, kSteps, 3, opt.kv_dtype);
  EXPECT_LE(first, kGrowthBound) << c.model << ": allocations of the first sequence";
  const int64_t second = count_sequence(**model, prompt, kSteps, 0, opt.kv_dtype);
  EXPECT_EQ(second, 0) << c.model << ": allocations of a second sequence as long";
}

// Two sequences decoded together over a paged cache of 8-position blocks (each reads one
// more block every 8 steps), counted from step `uncounted` on (-1: the prompts too).
int64_t count_paged_pair(DecoderModel& m, int steps, int uncounted) {
  constexpr int32_t kBlock = 8, kBlocksEach = 24;
  PagedKv kv(m.config(), 2 * kBlocksEach, kBlock, KvDtype::kF32, 2);
  std::vector<int32_t> tables(2 * kBlocksEach);
  for (int32_t b = 0; b < 2 * kBlocksEach; ++b) tables[static_cast<size_t>(b)] = b;
  const std::vector<int32_t> prompts[2] = {{100, 107, 114, 121, 128}, {200, 201}};
  std::vector<int32_t> next = {11, 12};
  std::vector<float> logits(static_cast<size_t>(2 * m.config().vocab_size));
  std::vector<SeqSlice> batch(2);
  std::optional<Window> w;
  bool ok = true;
  for (int s = -1; ok && s < steps; ++s) {
    if (s == uncounted) w.emplace();
    for (size_t q = 0; q < 2; ++q) {
      SeqSlice& sl = batch[q];
      sl.blocks = tables.data() + q * kBlocksEach;
      sl.slot = static_cast<int32_t>(q);
      if (s < 0) {
        sl.tokens = prompts[q].data();
        sl.count = static_cast<int64_t>(prompts[q].size());
        sl.start = 0;
      } else {
        sl.tokens = &next[q];
        sl.start += sl.count;
        sl.count = 1;
      }
    }
    ok = m.forward_batch(batch, kv, logits.data()).is_ok();
  }
  EXPECT_TRUE(ok);
  return w->close();
}

void expect_no_paged_allocations(const std::string& model_dir) {
  LoadOptions opt;
  opt.threads = 2;
  auto model = load_model(model_dir, opt);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_LE(count_paged_pair(**model, 120, 2), kGrowthBound) << model_dir << ": the first pair";
  EXPECT_EQ(count_paged_pair(**model, 120, -1), 0) << model_dir << ": a second pair";
}

TEST(StepAllocations, PagedBatch) {
  expect_no_paged_allocations(fixture("tiny-qwen3-moe"));
  expect_no_paged_allocations(fixture("tiny-qwen3_5-moe"));
}

TEST(StepAllocations, MoeBf16) { expect_no_step_allocations({fixture("tiny-qwen3-moe"), {}}); }

TEST(StepAllocations, DenseBf16) { expect_no_step_allocations({fixture("tiny-qwen3-dense"), {}}); }

TEST(StepAllocations, MoeMxSchemes) {
  for (Scheme s : {Scheme::kW8A8Mxfp8, Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4Dual}) {
    LoadOptions o;
    o.quantization = s;
    o.quantize_lm_head = true;
    expect_no_step_allocations({fixture("tiny-qwen3-moe"), o});
  }
}

TEST(StepAllocations, HybridQwen35) {
  expect_no_step_allocations({fixture("tiny-qwen3_5-moe"), {}});
  expect_no_step_allocations({fixture("tiny-qwen3_5-dense"), {}});
}

TEST(StepAllocations, GgufFiles) {
  for (const char* f : {"tiny-qwen3-moe-allmoe.Q4_K_M.gguf", "tiny-qwen3-moe-allmoe.MXFP4_MOE.gguf",
                        "tiny-qwen3_5-moe.Q8_0.gguf"}) {
    expect_no_step_allocations({fixture(std::string("gguf/") + f), {}});
  }
}

TEST(StepAllocations, Fp8KvCache) {
  LoadOptions o;
  o.kv_dtype = KvDtype::kFp8E4M3;
  expect_no_step_allocations({fixture("tiny-qwen3-moe"), o});
}

// Running `forward` on a fresh model in each of two expert-parallel (or tensor-parallel) ranks
// (threads joined by LocalComm); the window is open over rank 0's second sequence in both.
int64_t count_expert_parallel(LoadOptions opt, EpDispatch mode, bool tensor_parallel = false) {
  constexpr int32_t kSteps = 60;
  auto comms = make_local_comms(2);
  std::barrier sync(2);
  std::optional<Window> w;
  int64_t counted = -1;
  const std::vector<int32_t> prompt = {100, 107, 114};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      LoadOptions o = opt;
      o.threads = 1;
      Comm* comm = comms[static_cast<size_t>(r)].get();
      (tensor_parallel ? o.tp.comm : o.ep.comm) = comm;
      o.ep.mode = mode;
      auto model = load_model(fixture("tiny-qwen3-moe"), o);
      if (!model.is_ok()) {
        ADD_FAILURE() << model.status().to_string();
        comm->abort("load failed");
      }
      DecoderModel& m = **model;
      count_sequence(m, prompt, kSteps, -1, o.kv_dtype);
      KvCache cache(m.config(), 160, o.kv_dtype);
      std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
      sync.arrive_and_wait();
      if (r == 0) w.emplace();
      sync.arrive_and_wait();
      bool ok = m.forward(prompt.data(), 3, cache, false, logits.data()).is_ok();
      for (int32_t s = 0; ok && s < kSteps; ++s) {
        ok = m.forward(&s, 1, cache, false, logits.data()).is_ok();
      }
      EXPECT_TRUE(ok);
      sync.arrive_and_wait();
      if (r == 0) counted = w->close();
    });
  }
  for (std::thread& t : ranks) t.join();
  return counted;
}

TEST(StepAllocations, ExpertParallel) {
  for (std::optional<Scheme> scheme :
       {std::optional<Scheme>(), std::optional(Scheme::kW4A8Mxfp4)}) {
    for (EpDispatch mode : {EpDispatch::kNormal, EpDispatch::kLowLatency}) {
      LoadOptions o;
      o.quantization = scheme;
      EXPECT_EQ(count_expert_parallel(o, mode), 0)
          << (scheme ? scheme_info(*scheme).name : "bf16")
          << (mode == EpDispatch::kNormal ? ", normal" : ", low latency");
    }
  }
}

// Tensor parallelism: the all-reduces and the split lm_head's gather allocate nothing once warm.
TEST(StepAllocations, TensorParallel) {
  for (std::optional<Scheme> scheme :
       {std::optional<Scheme>(), std::optional(Scheme::kW8A8Mxfp8)}) {
    LoadOptions o;
    o.quantization = scheme;
    EXPECT_EQ(count_expert_parallel(o, EpDispatch::kAuto, true), 0)
        << (scheme ? scheme_info(*scheme).name : "bf16");
  }
}

}  // namespace
}  // namespace mx
