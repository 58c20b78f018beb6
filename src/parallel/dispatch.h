// The MoE dispatcher: top-k routing, dispatch of the routed rows to their experts, the expert
// bank, and the weighted combine, for one MoE layer of one forward pass. The expert bank
// declares the row format it consumes in each mode (ExpertBank::input_format); dispatchers
// write exactly that and never branch on schemes or platforms (ARCHITECTURE.md sections 4
// and 5).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "parallel/comm.h"
#include "quant/linear.h"

namespace mx {

// --ep-dispatch: SGLang's --deepep-mode.
enum class EpDispatch { kNormal, kLowLatency, kAuto };
const char* ep_dispatch_name(EpDispatch d);
bool parse_ep_dispatch(const std::string& text, EpDispatch* out);

struct EpOptions {
  Comm* comm = nullptr;  // null: one process
  EpDispatch mode = EpDispatch::kAuto;
  // Rows of one source rank a low-latency step may carry (DeepEP's
  // num_max_dispatch_tokens_per_rank); a step over it goes in normal mode.
  int64_t max_dispatch_tokens = 128;
  // --enable-dp-attention: each rank runs attention for its own requests (DecoderModel).
  bool dp_attention = false;
  // --enable-dp-lm-head: the lm_head split by vocabulary over those ranks (else whole on each).
  bool dp_lm_head = false;
};
// The largest --ep-max-dispatch-tokens accepted: a row header holds a 24-bit token index.
constexpr int64_t kMaxEpDispatchTokens = 1 << 16;

// The contiguous experts [first, first + count) rank `rank` of `size` holds.
struct ExpertRange {
  int64_t first = 0, count = 0;
};
ExpertRange expert_range(int64_t experts, int rank, int size);

// Seconds per part, summed over calls.
struct MoeTimes {
  double route = 0;     // softmax and top-k
  double dispatch = 0;  // counting, the fused quantization, packing and unpacking rows
  double gmm1 = 0, gmm2 = 0;
  double combine = 0;  // returned rows weighted and summed at their source, the gather
  // Expert parallelism only, measured when timed by a barrier before each collective: skew
  // is the wait for the other ranks to arrive (the slowest rank's extra work), exchange the
  // collective itself once every rank has arrived.
  double skew = 0, exchange = 0;
};

// Attributes the time since the previous lap to one field of a MoeTimes (null: untimed).
class MoeClock {
 public:
  explicit MoeClock(MoeTimes* t) : t_(t) {
    if (t_) last_ = std::chrono::steady_clock::now();
  }
  void lap(double MoeTimes::*field) {
    if (!t_) return;
    const auto now = std::chrono::steady_clock::now();
    t_->*field += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  void skip() {
    if (t_) last_ = std::chrono::steady_clock::now();
  }
  bool timed() const { return t_ != nullptr; }

 private:
  MoeTimes* t_;
  std::chrono::steady_clock::time_point last_;
};

// Counters since construction (expert parallelism only; zero in one process).
struct DispatchStats {
  uint64_t rows_sent = 0;           // routed rows that left this rank
  uint64_t row_bytes_sent = 0;      // their bytes: header and payload
  uint64_t meta_bytes_sent = 0;     // per-expert row counts
  uint64_t combine_bytes_sent = 0;  // BF16 expert outputs returned to their sources
  uint64_t gather_bytes_sent = 0;   // combined rows shared with the other ranks
  uint64_t low_latency_layers = 0, normal_layers = 0;
  uint64_t fallback_layers = 0, fallback_steps = 0;  // low latency asked, over capacity
};

struct MoeArgs {
  const ExpertBank* experts = nullptr;  // this rank's experts (all of them in one process)
  // Tensor parallelism with whole experts per rank: the bank holds experts [first_expert,
  // first_expert + its count); the local dispatcher leaves the others' rows to their ranks.
  int64_t first_expert = 0;
  int64_t num_experts = 0;  // of the layer, over all ranks
  int64_t top_k = 0;
  bool norm_topk_prob = false;
  float* probs = nullptr;    // [rows, num_experts]: router logits in, softmax out
  const float* h = nullptr;  // [rows, hidden] the normed rows, identical on every rank
  float* x = nullptr;        // [rows, hidden] out: the routed experts' weighted sum
  int64_t rows = 0, hidden = 0;
  bool has_prefill = false;  // the step holds prefill chunks (--ep-dispatch auto)
  // Data-parallel attention: the rows are this rank's own (every rank has others), the source
  // of all of them, and none is gathered back; most_rows is the most any rank has, so that
  // every rank picks the same mode. Otherwise every rank holds every row.
  bool own_rows = false;
  int64_t most_rows = 0;
  uint64_t step = 0;  // the forward pass, for per-step counters
  ScaleRule rule = ScaleRule::kFloor;
  bool fused = true;            // one process: quantize in the dispatch (off: FP32 rows to gmm1)
  ExecContext* exec = nullptr;  // the caller's; run_experts needs one
  int32_t* ids = nullptr;       // [rows, top_k] out: the chosen experts
  float* wts = nullptr;         // [rows, top_k] out: their weights
  MoeTimes* times = nullptr;    // null: untimed
};

class MoeDispatcher {
 public:
  virtual ~MoeDispatcher() = default;
  virtual void run(const MoeArgs& a) = 0;
  virtual DispatchStats stats() const { return {}; }
  virtual int ep_size() const { return 1; }
  virtual int ep_rank() const { return 0; }
};

// One process: rows permuted by expert in the bank's kLocal format.
std::unique_ptr<MoeDispatcher> make_local_dispatcher();
// Experts split over o.comm's ranks; every rank must build the same one.
std::unique_ptr<MoeDispatcher> make_ep_dispatcher(const EpOptions& o);

// The bank over rows grouped by its experts, its GEMM times added to a.times.
void run_experts(const MoeArgs& a, const ActRows& rows, const int64_t* offsets, float* outs);

// The order in which one token's k weighted expert outputs are summed: by expert id, from zero,
// as the reference implementations add them (an index_add per expert). Summed in rank order
// instead, FP32 rounding lands elsewhere, and the MX schemes' next activation quantization
// amplifies a one-ulp difference at a rounding tie into a different code.
void combine_order(const int32_t* ids, int64_t k, int64_t* order);

// FP32 softmax over each row of probs, then the top k (highest first, ties to the lower id),
// renormalized when `norm`. order: scratch for `experts` ids.
void route_top_k(float* probs, int64_t rows, int64_t experts, int64_t k, bool norm, int32_t* ids,
                 float* wts, int32_t* order);

}  // namespace mx
