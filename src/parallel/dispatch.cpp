// Routing, placement and the one-process dispatcher.
#include "parallel/dispatch.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <span>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace mx {

const char* ep_dispatch_name(EpDispatch d) {
  switch (d) {
    case EpDispatch::kNormal:
      return "normal";
    case EpDispatch::kLowLatency:
      return "low_latency";
    case EpDispatch::kAuto:
      return "auto";
  }
  return "auto";
}

bool parse_ep_dispatch(const std::string& text, EpDispatch* out) {
  for (EpDispatch d : {EpDispatch::kNormal, EpDispatch::kLowLatency, EpDispatch::kAuto}) {
    if (text == ep_dispatch_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

ExpertRange expert_range(int64_t experts, int rank, int size) {
  const int64_t first = experts * rank / size;
  return {first, experts * (rank + 1) / size - first};
}

void combine_order(const int32_t* ids, int64_t k, int64_t* order) {
  std::iota(order, order + k, int64_t{0});
  std::sort(order, order + k, [ids](int64_t a, int64_t b) { return ids[a] < ids[b]; });
}

void route_top_k(float* probs, int64_t rows, int64_t experts, int64_t k, bool norm, int32_t* ids,
                 float* wts, int32_t* order) {
  for (int64_t t = 0; t < rows; ++t) {
    float* p = probs + t * experts;
    softmax(p, experts);
    std::iota(order, order + experts, 0);
    // Highest probability first; ties to the lower expert id.
    std::partial_sort(order, order + k, order + experts,
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      wts[t * k + j] = norm ? p[order[j]] / sum : p[order[j]];
    }
  }
}

void run_experts(const MoeArgs& a, const ActRows& rows, const int64_t* offsets, float* outs) {
  MX_CHECK(a.exec != nullptr);
  ExpertTimes et;
  a.experts->run(rows, offsets, outs, *a.exec, a.times ? &et : nullptr);
  if (a.times) {
    a.times->gmm1 += et.gmm1;
    a.times->gmm2 += et.gmm2;
  }
}

namespace {

class LocalDispatcher final : public MoeDispatcher {
 public:
  void run(const MoeArgs& a) override {
    ActRows& rows = rows_;
    std::vector<float>& outs = outs_;
    const int64_t n = a.rows, hid = a.hidden, k = a.top_k, ne = a.num_experts;
    MoeClock clock(a.times);
    // Routing, the dispatch's quantization and the combine are row by row, each row alone, so
    // from kParallelRows rows on they split over the threads with the same results.
    ThreadPool* pool = a.exec != nullptr ? a.exec->pool() : nullptr;
    const int threads = pool != nullptr ? pool->num_threads() : 1;
    order_.resize(static_cast<size_t>(ne * threads));
    for_ranges(
        pool, n,
        [&](int64_t b, int64_t e, int thread) {
          route_top_k(a.probs + b * ne, e - b, ne, k, a.norm_topk_prob, a.ids + b * k,
                      a.wts + b * k, order_.data() + thread * ne);
        },
        kParallelRows);
    clock.lap(&MoeTimes::route);
    // Rows sorted by expert, written straight into the format the expert kernel declares.
    // Each token row is quantized once, into its first slot, and copied to the rest: the
    // quantization is part of the permutation, not a pass of its own.
    const int64_t first = a.first_expert, local = a.experts->num_experts();
    auto mine = [first, local](int32_t id) { return id >= first && id < first + local; };
    std::vector<int64_t>& offsets = offsets_;
    offsets.assign(static_cast<size_t>(local + 1), 0);
    for (int64_t i = 0; i < n * k; ++i) {
      if (mine(a.ids[i])) ++offsets[static_cast<size_t>(a.ids[i] - first) + 1];
    }
    for (int64_t e = 0; e < local; ++e) offsets[e + 1] += offsets[e];
    std::vector<int64_t>& slot = slot_;
    slot.resize(static_cast<size_t>(n * k));
    fill_.assign(offsets.begin(), offsets.end() - 1);
    for (int64_t i = 0; i < n * k; ++i) {
      slot[static_cast<size_t>(i)] =
          mine(a.ids[i]) ? fill_[static_cast<size_t>(a.ids[i] - first)]++ : -1;
    }
    const RowFormat decl =
        a.fused ? a.experts->input_format(DispatchMode::kLocal) : RowFormat::f32();
    act_rows_init(decl, hid, a.rule, &rows);
    rows.resize(offsets[static_cast<size_t>(local)]);
    const auto place = [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        int64_t quantized = -1;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t s = slot[static_cast<size_t>(t * k + j)];
          if (s < 0) continue;
          if (quantized < 0) {
            act_rows_quantize(a.h + t * hid, s, a.rule, &rows);
            quantized = s;
          } else {
            act_rows_copy(rows, quantized, &rows, s);
          }
        }
      }
    };
    for_ranges(pool, n, place, kParallelRows);
    // Grown only: every row is written by the bank before the combine reads it.
    if (outs.size() < static_cast<size_t>(offsets[static_cast<size_t>(local)] * hid))
      outs.resize(static_cast<size_t>(offsets[static_cast<size_t>(local)] * hid));
    clock.lap(&MoeTimes::dispatch);
    run_experts(a, rows, offsets.data(), outs.data());
    clock.skip();
    // The weighted un-permute back to token order.
    combine_order_.resize(static_cast<size_t>(k * threads));
    const auto combine = [&](int64_t b, int64_t e, int thread) {
      int64_t* order = combine_order_.data() + thread * k;
      for (int64_t t = b; t < e; ++t) {
        float* dst = a.x + t * hid;
        std::fill(dst, dst + hid, 0.0f);
        combine_order(a.ids + t * k, k, order);
        for (int64_t j : std::span<const int64_t>(order, static_cast<size_t>(k))) {
          const int64_t s = slot[static_cast<size_t>(t * k + j)];
          if (s < 0) continue;
          const float wj = a.wts[t * k + j];
          const float* o = outs.data() + s * hid;
          for (int64_t d = 0; d < hid; ++d) dst[d] += wj * o[d];
        }
      }
    };
    for_ranges(pool, n, combine, kParallelRows);
    clock.lap(&MoeTimes::combine);
  }

 private:
  // Kept from step to step at their largest: a 512-token prefill of the 30B-A3B shape
  // permutes 8 MB of codes and 32 MB of outputs per layer, which fresh vectors paid for again
  // in page faults and zero-filling every layer (72 of 120 ms of dispatch per layer).
  ActRows rows_;
  std::vector<float> outs_;
  // Routing's bookkeeping, kept likewise so that a step allocates nothing once warm.
  std::vector<int32_t> order_;
  std::vector<int64_t> offsets_, slot_, fill_, combine_order_;
};

}  // namespace

std::unique_ptr<MoeDispatcher> make_local_dispatcher() {
  return std::make_unique<LocalDispatcher>();
}

}  // namespace mx
