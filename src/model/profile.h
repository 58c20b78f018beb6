// Wall time of each part of the forward pass, summed over calls, for `mxserve bench
// --profile`. Off unless a model is given one; a phase then costs two clock reads.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace mx {

enum class Phase : int {
  kEmbed,
  kNorms,      // input and post-attention norms with the residual adds
  kQkv,        // the packed q/k/v projection
  kAttention,  // q/k norms, RoPE, the KV cache write and attention over the cache
  kOProj,
  kDenseMlp,      // gate/up, SwiGLU and down of dense layers
  kRouter,        // gate projection, softmax and top-k
  kDispatch,      // permutation by expert with the fused activation quantization
  kGmm1,          // gate/up grouped GEMM with the SwiGLU + requantization epilogue
  kGmm2,          // down grouped GEMM
  kCombine,       // weighted un-permute
  kLmHead,        // final norm and lm_head
  kSharedExpert,  // the MoE shared expert and its sigmoid gate
  kDnProj,        // DeltaNet in_proj_qkvz, in_proj_ba and out_proj
  kDnConv,        // causal conv1d + SiLU, q/k L2 norms, beta and decay gates
  kDeltaRule,     // the gated delta rule over the recurrent state
  kDnNorm,        // the gated RMSNorm with silu(z)
  kEpSkew,        // expert parallelism: waiting for the other ranks to reach a collective
  kEpExchange,    // expert parallelism: the collectives once every rank has reached them
  kTpAllReduce,   // tensor parallelism: the sums of the ranks' partial block outputs
  kCount
};

const char* phase_name(Phase p);
// The layer type a phase belongs to: "all", "dense", "moe", "linear" (DeltaNet) or "head".
const char* phase_layer_type(Phase p);

struct ForwardProfile {
  std::array<double, static_cast<size_t>(Phase::kCount)> seconds{};
  int64_t forwards = 0;
  void add(Phase p, double s) { seconds[static_cast<size_t>(p)] += s; }
  double total() const;
  void reset() { *this = ForwardProfile{}; }
};

// Adds the time until destruction (or stop()) to `phase` when `prof` is not null.
class PhaseTimer {
 public:
  PhaseTimer(ForwardProfile* prof, Phase phase) : prof_(prof), phase_(phase) {
    if (prof_) start_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() { stop(); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
  void stop() {
    if (!prof_) return;
    prof_->add(phase_,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    prof_ = nullptr;
  }

 private:
  ForwardProfile* prof_;
  Phase phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mx
