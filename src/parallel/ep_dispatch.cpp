// Expert parallelism: every rank holds the same rows (the rest of the model is replicated);
// each is the source of a contiguous share of the tokens and the owner of a contiguous range
// of experts. Per MoE layer: per-(rank, expert) row counts travel first, then the rows in
// the format the bank declares for the mode, each behind a 4-byte header (its source token
// and top-k slot); the owners run their experts and return rows in the order received, in
// the format the bank declares (BF16 in normal mode);
// each source applies the weights in a fixed order and the combined rows are gathered, so no
// result depends on arrival order or on the number of ranks.
#include <algorithm>
#include <cstring>
#include <vector>

#include "formats/half.h"
#include "parallel/dispatch.h"

namespace mx {
namespace {

constexpr int64_t kHeaderBytes = 4;  // token index (24 bits) | top-k slot << 24

// A routed row on the wire: header, then codes, E8M0 scales and (dual) chunk scales, or
// BF16 values.
struct WireFormat {
  RowFormat format = RowFormat::f32();
  ActRows layout;  // row geometry of the quantized format
  int64_t payload = 0;

  void init(RowFormat f, int64_t hidden, ScaleRule rule) {
    format = f;
    act_rows_init(f, hidden, rule, &layout);
    if (!layout.quantized) {
      payload = 2 * hidden;
      return;
    }
    payload = layout.row_bytes + mx_num_blocks(hidden);
    if (layout.dual) payload += mx_num_chunks(hidden) * static_cast<int64_t>(sizeof(float));
  }
  int64_t row() const { return kHeaderBytes + payload; }
};

class EpDispatcher final : public MoeDispatcher {
 public:
  explicit EpDispatcher(const EpOptions& o)
      : comm_(*o.comm), mode_(o.mode), max_tokens_(o.max_dispatch_tokens) {}
  int ep_size() const override { return comm_.size(); }
  int ep_rank() const override { return comm_.rank(); }
  DispatchStats stats() const override { return stats_; }

  void run(const MoeArgs& a) override {
    MoeClock clock(a.times);
    own_rows_ = a.own_rows;
    route_order_.resize(static_cast<size_t>(a.num_experts));
    route_top_k(a.probs, a.rows, a.num_experts, a.top_k, a.norm_topk_prob, a.ids, a.wts,
                route_order_.data());
    clock.lap(&MoeTimes::route);
    const bool low_latency = choose_mode(a);
    const RowFormat wire = a.experts->input_format(low_latency ? DispatchMode::kEpLowLatency
                                                               : DispatchMode::kEpNormal);
    wire_.init(wire, a.hidden, a.rule);
    out_f32_ = a.experts->combine_format(low_latency ? DispatchMode::kEpLowLatency
                                                     : DispatchMode::kEpNormal) == RowFloat::kF32;
    place(a.num_experts);
    pack_rows(a);
    clock.lap(&MoeTimes::dispatch);
    arrive(clock);
    exchange_counts(a);
    clock.lap(&MoeTimes::exchange);
    prepare_receive(a, low_latency);
    clock.lap(&MoeTimes::dispatch);
    arrive(clock);
    call(comm_.all_to_all_v(send_.data(), send_bytes_.data(), send_offsets_.data(), recv_.data(),
                            recv_bytes_.data(), recv_offsets_.data()),
         "dispatch");
    clock.lap(&MoeTimes::exchange);
    unpack_rows(a);
    clock.lap(&MoeTimes::dispatch);
    run_experts(a, rows_, bank_offsets_.data(), outs_.data());
    clock.skip();
    pack_outputs(a);
    clock.lap(&MoeTimes::combine);
    arrive(clock);
    return_outputs(a);
    clock.lap(&MoeTimes::exchange);
    combine(a);
    clock.lap(&MoeTimes::combine);
    if (a.own_rows) return;
    arrive(clock);
    gather(a);
    clock.lap(&MoeTimes::exchange);
  }

 private:
  void call(const Status& st, const char* what) {
    if (!st.is_ok()) comm_.abort(std::string("expert ") + what + " failed: " + st.to_string());
  }

  // Timed runs only: a barrier before a collective, so that the time until every rank has
  // reached it (one rank still running its experts) is skew and the collective after it is
  // the exchange proper.
  void arrive(MoeClock& clock) {
    if (!clock.timed()) return;
    call(comm_.barrier(), "barrier");
    clock.lap(&MoeTimes::skew);
  }

  // Under data-parallel attention every row is this rank's (only its own bounds are asked).
  int64_t token_begin(int64_t rows, int q) const {
    if (own_rows_) return q <= comm_.rank() ? 0 : rows;
    return rows * q / comm_.size();
  }

  bool choose_mode(const MoeArgs& a) {
    const int n = comm_.size();
    bool ll = mode_ == EpDispatch::kLowLatency || (mode_ == EpDispatch::kAuto && !a.has_prefill);
    // Every rank knows every rank's row count, so every rank makes the same choice.
    const int64_t most = a.own_rows ? a.most_rows : (a.rows + n - 1) / n;
    if (ll && most > max_tokens_) {
      ll = false;
      ++stats_.fallback_layers;
      if (a.step != last_fallback_step_ || stats_.fallback_steps == 0) ++stats_.fallback_steps;
      last_fallback_step_ = a.step;
    }
    ++(ll ? stats_.low_latency_layers : stats_.normal_layers);
    return ll;
  }

  // owner_[e], local_[e]: the rank holding expert e and its index there.
  void place(int64_t experts) {
    if (static_cast<int64_t>(owner_.size()) == experts) return;
    const int n = comm_.size();
    owner_.assign(static_cast<size_t>(experts), 0);
    local_.assign(static_cast<size_t>(experts), 0);
    max_local_ = 0;
    for (int q = 0; q < n; ++q) {
      const ExpertRange r = expert_range(experts, q, n);
      max_local_ = std::max(max_local_, r.count);
      for (int64_t i = 0; i < r.count; ++i) {
        owner_[static_cast<size_t>(r.first + i)] = q;
        local_[static_cast<size_t>(r.first + i)] = static_cast<int32_t>(i);
      }
    }
  }

  // Rows of this rank's tokens grouped by destination rank, then by expert there, then in
  // (token, slot) order; each token quantized once and copied to its k rows.
  void pack_rows(const MoeArgs& a) {
    const int n = comm_.size(), me = comm_.rank();
    const int64_t k = a.top_k, t0 = token_begin(a.rows, me), t1 = token_begin(a.rows, me + 1);
    counts_.assign(static_cast<size_t>(n * max_local_), 0);
    for (int64_t i = t0 * k; i < t1 * k; ++i) {
      const size_t e = static_cast<size_t>(a.ids[i]);
      ++counts_[static_cast<size_t>(owner_[e] * max_local_ + local_[e])];
    }
    std::vector<int64_t>& fill = fill_;
    fill.assign(counts_.size() + 1, 0);
    for (size_t c = 0; c < counts_.size(); ++c) fill[c + 1] = fill[c] + counts_[c];
    const int64_t total = fill.back(), row = wire_.row();
    send_.resize(static_cast<size_t>(total * row));
    send_pos_.resize(static_cast<size_t>((t1 - t0) * k));
    ActRows& one = one_;
    act_rows_init(wire_.format, a.hidden, a.rule, &one);
    one.resize(1);
    std::vector<uint16_t>& bf = bf_;
    bf.resize(static_cast<size_t>(a.hidden));
    // BF16 rows that an MX bank requantizes on arrival are rounded to odd: its E8M0 scales
    // and element codes are then those of the FP32 rows (half.h), and only the BF16 combine
    // stands between normal mode and one process for single-level schemes.
    const bool requantized = a.experts->input_format(DispatchMode::kLocal).quantized();
    for (int64_t t = t0; t < t1; ++t) {
      const float* src = a.h + t * a.hidden;
      if (one.quantized) {
        act_rows_quantize(src, 0, a.rule, &one);
      } else {
        for (int64_t d = 0; d < a.hidden; ++d) {
          bf[static_cast<size_t>(d)] =
              requantized ? float_to_bf16_odd(src[d]) : float_to_bf16(src[d]);
        }
      }
      for (int64_t j = 0; j < k; ++j) {
        const size_t e = static_cast<size_t>(a.ids[t * k + j]);
        const int64_t pos = fill[static_cast<size_t>(owner_[e] * max_local_ + local_[e])]++;
        send_pos_[static_cast<size_t>((t - t0) * k + j)] = pos;
        uint8_t* out = send_.data() + pos * row;
        const uint32_t header = static_cast<uint32_t>(t - t0) | static_cast<uint32_t>(j) << 24;
        std::memcpy(out, &header, kHeaderBytes);
        write_payload(one, bf.data(), out + kHeaderBytes);
      }
    }
    send_bytes_.assign(static_cast<size_t>(n), 0);
    send_offsets_.assign(static_cast<size_t>(n), 0);
    for (int q = 0; q < n; ++q) {
      int64_t rows = 0;
      for (int64_t l = 0; l < max_local_; ++l)
        rows += counts_[static_cast<size_t>(q * max_local_ + l)];
      send_bytes_[static_cast<size_t>(q)] = rows * row;
      if (q + 1 < n)
        send_offsets_[static_cast<size_t>(q + 1)] =
            send_offsets_[static_cast<size_t>(q)] + rows * row;
      if (q != me) {
        stats_.rows_sent += static_cast<uint64_t>(rows);
        stats_.row_bytes_sent += static_cast<uint64_t>(rows * row);
      }
    }
  }

  void write_payload(const ActRows& one, const uint16_t* bf, uint8_t* out) const {
    if (!one.quantized) {
      std::memcpy(out, bf, static_cast<size_t>(wire_.payload));
      return;
    }
    const int64_t nb = mx_num_blocks(one.k);
    std::memcpy(out, one.codes.data(), static_cast<size_t>(one.row_bytes));
    std::memcpy(out + one.row_bytes, one.scales.data(), static_cast<size_t>(nb));
    if (one.dual) {
      std::memcpy(out + one.row_bytes + nb, one.chunk_scales.data(),
                  static_cast<size_t>(mx_num_chunks(one.k)) * sizeof(float));
    }
  }

  void exchange_counts(const MoeArgs& a) {
    const int n = comm_.size();
    recv_counts_.assign(counts_.size(), 0);
    call(comm_.all_to_all(counts_.data(), recv_counts_.data(),
                          max_local_ * static_cast<int64_t>(sizeof(int64_t))),
         "count exchange");
    stats_.meta_bytes_sent += static_cast<uint64_t>((n - 1) * max_local_) * sizeof(int64_t);
  }

  // Low latency: each source has its fixed slot region, sized once by the dispatch limit.
  void prepare_receive(const MoeArgs& a, bool low_latency) {
    const int n = comm_.size();
    const int64_t row = wire_.row();
    recv_bytes_.assign(static_cast<size_t>(n), 0);
    recv_offsets_.assign(static_cast<size_t>(n), 0);
    const int64_t slot_rows = max_tokens_ * std::min<int64_t>(a.top_k, max_local_);
    int64_t off = 0;
    for (int s = 0; s < n; ++s) {
      int64_t rows = 0;
      for (int64_t l = 0; l < max_local_; ++l)
        rows += recv_counts_[static_cast<size_t>(s * max_local_ + l)];
      recv_bytes_[static_cast<size_t>(s)] = rows * row;
      recv_offsets_[static_cast<size_t>(s)] = low_latency ? s * slot_rows * row : off;
      off += rows * row;
    }
    const int64_t need = low_latency ? n * slot_rows * row : off;
    if (static_cast<int64_t>(recv_.size()) < need) recv_.resize(static_cast<size_t>(need));
  }

  // Received rows into the bank's order: by local expert, then by source rank.
  void unpack_rows(const MoeArgs& a) {
    const int n = comm_.size();
    const int64_t row = wire_.row(), hid = a.hidden;
    bank_offsets_.assign(static_cast<size_t>(a.experts->num_experts() + 1), 0);
    for (int64_t l = 0; l < a.experts->num_experts(); ++l) {
      int64_t rows = 0;
      for (int s = 0; s < n; ++s) rows += recv_counts_[static_cast<size_t>(s * max_local_ + l)];
      bank_offsets_[static_cast<size_t>(l + 1)] = bank_offsets_[static_cast<size_t>(l)] + rows;
    }
    const int64_t total = bank_offsets_.back();
    rows_ = wire_.layout;
    rows_.resize(total);
    // bank row of the i-th row received from s, in s's order (for the return trip).
    bank_row_.resize(static_cast<size_t>(total));
    std::vector<int64_t>& fill = fill_;
    fill.assign(bank_offsets_.begin(), bank_offsets_.end() - 1);
    const int64_t nb = mx_num_blocks(hid);
    int64_t i = 0;
    for (int s = 0; s < n; ++s) {
      const uint8_t* src = recv_.data() + recv_offsets_[static_cast<size_t>(s)];
      for (int64_t l = 0; l < max_local_; ++l) {
        const int64_t c = recv_counts_[static_cast<size_t>(s * max_local_ + l)];
        for (int64_t r = 0; r < c; ++r, ++i, src += row) {
          const int64_t b = fill[static_cast<size_t>(l)]++;
          bank_row_[static_cast<size_t>(i)] = b;
          const uint8_t* p = src + kHeaderBytes;
          if (!rows_.quantized) {
            const uint16_t* v = reinterpret_cast<const uint16_t*>(p);
            float* dst = rows_.f32.data() + b * hid;
            for (int64_t d = 0; d < hid; ++d) dst[d] = bf16_to_float(v[d]);
            continue;
          }
          std::memcpy(rows_.codes.data() + b * rows_.row_bytes, p,
                      static_cast<size_t>(rows_.row_bytes));
          std::memcpy(rows_.scales.data() + b * nb, p + rows_.row_bytes, static_cast<size_t>(nb));
          if (rows_.dual) {
            const int64_t nc = mx_num_chunks(hid);
            std::memcpy(rows_.chunk_scales.data() + b * nc, p + rows_.row_bytes + nb,
                        static_cast<size_t>(nc) * sizeof(float));
          }
        }
      }
    }
    outs_.resize(static_cast<size_t>(total * hid));
  }

  // Expert outputs in the bank's combine format, in each source's order.
  void pack_outputs(const MoeArgs& a) {
    const int n = comm_.size(), me = comm_.rank();
    const int64_t hid = a.hidden, out_row = out_row_bytes(hid);
    const int64_t total = static_cast<int64_t>(bank_row_.size());
    back_send_.resize(static_cast<size_t>(total * out_row));
    for (int64_t i = 0; i < total; ++i) {
      const float* o = outs_.data() + bank_row_[static_cast<size_t>(i)] * hid;
      uint8_t* dst = back_send_.data() + i * out_row;
      if (out_f32_) {
        std::memcpy(dst, o, static_cast<size_t>(out_row));
        continue;
      }
      uint16_t* v = reinterpret_cast<uint16_t*>(dst);
      for (int64_t d = 0; d < hid; ++d) v[d] = float_to_bf16(o[d]);
    }
    const int64_t row = wire_.row();
    back_send_bytes_.resize(static_cast<size_t>(n));
    back_send_offsets_.resize(static_cast<size_t>(n));
    back_recv_bytes_.resize(static_cast<size_t>(n));
    back_recv_offsets_.resize(static_cast<size_t>(n));
    int64_t off = 0;
    for (int q = 0; q < n; ++q) {
      const size_t sq = static_cast<size_t>(q);
      const int64_t got = recv_bytes_[sq] / row;
      back_send_bytes_[sq] = got * out_row;
      back_send_offsets_[sq] = off * out_row;
      off += got;
      back_recv_bytes_[sq] = send_bytes_[sq] / row * out_row;
      back_recv_offsets_[sq] = send_offsets_[sq] / row * out_row;
      if (q != me) stats_.combine_bytes_sent += static_cast<uint64_t>(got * out_row);
    }
  }

  int64_t out_row_bytes(int64_t hid) const {
    return hid * static_cast<int64_t>(out_f32_ ? sizeof(float) : sizeof(uint16_t));
  }

  void return_outputs(const MoeArgs& a) {
    const int64_t rows = static_cast<int64_t>(send_.size()) / wire_.row();
    back_recv_.resize(static_cast<size_t>(rows * out_row_bytes(a.hidden)));
    call(comm_.all_to_all_v(back_send_.data(), back_send_bytes_.data(), back_send_offsets_.data(),
                            back_recv_.data(), back_recv_bytes_.data(), back_recv_offsets_.data()),
         "combine");
  }

  // Weights applied at the source, in the one process's order (combine_order).
  void combine(const MoeArgs& a) {
    const int me = comm_.rank();
    const int64_t k = a.top_k, hid = a.hidden, out_row = out_row_bytes(hid);
    const int64_t t0 = token_begin(a.rows, me), t1 = token_begin(a.rows, me + 1);
    std::vector<int64_t>& order = order_;
    order.resize(static_cast<size_t>(k));
    for (int64_t t = t0; t < t1; ++t) {
      float* dst = a.x + t * hid;
      std::fill(dst, dst + hid, 0.0f);
      combine_order(a.ids + t * k, k, order.data());
      for (int64_t j : order) {
        const float wj = a.wts[t * k + j];
        const uint8_t* o =
            back_recv_.data() + send_pos_[static_cast<size_t>((t - t0) * k + j)] * out_row;
        if (out_f32_) {
          const float* f = reinterpret_cast<const float*>(o);
          for (int64_t d = 0; d < hid; ++d) dst[d] += wj * f[d];
        } else {
          const uint16_t* v = reinterpret_cast<const uint16_t*>(o);
          for (int64_t d = 0; d < hid; ++d) dst[d] += wj * bf16_to_float(v[d]);
        }
      }
    }
  }

  // Every rank's combined rows to every rank (FP32: the residual stream stays exact).
  void gather(const MoeArgs& a) {
    const int n = comm_.size(), me = comm_.rank();
    const int64_t hid = a.hidden, bytes = hid * static_cast<int64_t>(sizeof(float));
    const int64_t t0 = token_begin(a.rows, me), t1 = token_begin(a.rows, me + 1);
    gather_send_.assign(a.x + t0 * hid, a.x + t1 * hid);
    std::vector<int64_t>&sb = gather_sb_, &so = gather_so_, &rb = gather_rb_, &ro = gather_ro_;
    sb.resize(static_cast<size_t>(n));
    so.assign(static_cast<size_t>(n), 0);
    rb.resize(static_cast<size_t>(n));
    ro.resize(static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) {
      const int64_t b = token_begin(a.rows, q), e = token_begin(a.rows, q + 1);
      sb[static_cast<size_t>(q)] = q == me ? 0 : (t1 - t0) * bytes;
      rb[static_cast<size_t>(q)] = q == me ? 0 : (e - b) * bytes;
      ro[static_cast<size_t>(q)] = b * bytes;
      if (q != me) stats_.gather_bytes_sent += static_cast<uint64_t>((t1 - t0) * bytes);
    }
    call(comm_.all_to_all_v(gather_send_.data(), sb.data(), so.data(), a.x, rb.data(), ro.data()),
         "gather");
  }

  Comm& comm_;
  bool own_rows_ = false;
  EpDispatch mode_;
  int64_t max_tokens_;
  DispatchStats stats_;
  uint64_t last_fallback_step_ = 0;
  WireFormat wire_;
  std::vector<int32_t> route_order_;
  std::vector<int> owner_;
  std::vector<int32_t> local_;
  int64_t max_local_ = 0;
  std::vector<int64_t> counts_, recv_counts_;  // [rank][local expert]
  std::vector<uint8_t> send_, recv_;
  std::vector<int64_t> send_pos_;  // row of (token, slot) in send_
  std::vector<int64_t> send_bytes_, send_offsets_, recv_bytes_, recv_offsets_;
  std::vector<int64_t> bank_offsets_, bank_row_;
  ActRows rows_;
  std::vector<float> outs_;
  bool out_f32_ = false;  // combine rows FP32 (else BF16), as the bank declares
  std::vector<uint8_t> back_send_, back_recv_;
  std::vector<int64_t> back_send_bytes_, back_send_offsets_, back_recv_bytes_, back_recv_offsets_;
  std::vector<float> gather_send_;
  std::vector<int64_t> gather_sb_, gather_so_, gather_rb_, gather_ro_;
  // Scratch kept from call to call, so that a warm step allocates nothing.
  std::vector<int64_t> fill_, order_;
  ActRows one_;  // one token's row in the wire format
  std::vector<uint16_t> bf_;
};

}  // namespace

std::unique_ptr<MoeDispatcher> make_ep_dispatcher(const EpOptions& o) {
  return std::make_unique<EpDispatcher>(o);
}

}  // namespace mx
