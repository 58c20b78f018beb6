#include "model/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "model/blocks.h"

namespace mx {

std::pair<int64_t, int64_t> TpShard::heads(int64_t n) const {
  return {n * rank / size, n * (rank + 1) / size};
}

std::pair<int64_t, int64_t> TpShard::kv_heads(int64_t n) const {
  if (n >= size) return heads(n);
  const int64_t h = rank / (size / n);
  return {h, h + 1};
}

std::pair<int64_t, int64_t> TpShard::width(int64_t n, int64_t unit) const {
  const int64_t units = (n + unit - 1) / unit;
  const int64_t b = units * rank / size, e = units * (rank + 1) / size;
  return {std::min(n, b * unit), std::min(n, e * unit)};
}

namespace {

Status indivisible(const std::string& what, int64_t n, int size) {
  return invalid_argument("--tp-size " + std::to_string(size) + " cannot split " + what + " (" +
                          std::to_string(n) + ") evenly over the ranks");
}

}  // namespace

Status check_tensor_parallel(const ModelConfig& c, int size) {
  if (size <= 1) return Status::ok();
  if (c.num_heads % size != 0) return indivisible("num_attention_heads", c.num_heads, size);
  const int64_t kv = c.num_kv_heads;
  if (kv % size != 0 && size % kv != 0) {
    return invalid_argument("--tp-size " + std::to_string(size) + " and num_key_value_heads " +
                            std::to_string(kv) +
                            ": one must divide the other (KV heads are split, or replicated "
                            "when there are fewer than ranks)");
  }
  if (c.linear_num_key_heads > 0) {
    const int64_t nk = c.linear_num_key_heads;
    if (nk % size != 0 && size % nk != 0) {
      return invalid_argument("--tp-size " + std::to_string(size) + " and linear_num_key_heads " +
                              std::to_string(nk) + ": one must divide the other");
    }
    if (c.linear_num_value_heads % size != 0) {
      return indivisible("linear_num_value_heads", c.linear_num_value_heads, size);
    }
  }
  return Status::ok();
}

bool splits_at(int64_t n, int64_t unit, int size) { return (n + unit - 1) / unit >= size; }

Status check_width_split(const std::string& what, int64_t n, int64_t unit, int size) {
  if (splits_at(n, unit, size)) return Status::ok();
  const int64_t units = (n + unit - 1) / unit;
  return invalid_argument("--tp-size " + std::to_string(size) + " cannot split " + what + " (" +
                          std::to_string(n) + ", " + std::to_string(units) + " blocks of " +
                          std::to_string(unit) + ", where shards must begin) over the ranks");
}

ModelConfig tp_local_config(const ModelConfig& c, const TpShard& s) {
  if (!s.on()) return c;
  ModelConfig l = c;
  l.num_heads = c.num_heads / s.size;
  const auto [k0, k1] = s.kv_heads(c.num_kv_heads);
  l.num_kv_heads = k1 - k0;
  if (c.linear_num_key_heads > 0) {
    const auto [h0, h1] = s.kv_heads(c.linear_num_key_heads);
    l.linear_num_key_heads = h1 - h0;
  }
  l.linear_num_value_heads = c.linear_num_value_heads / s.size;
  return l;
}

namespace {

class GatheredRowParallel final : public Linear {
 public:
  GatheredRowParallel(std::unique_ptr<Linear> rows, Comm* comm, int64_t k, Ranges cols, int64_t out,
                      int64_t n0, int64_t n1, int64_t in)
      : Linear(in, out),
        rows_(std::move(rows)),
        comm_(comm),
        k_(k),
        cols_(std::move(cols)),
        n0_(n0),
        n1_(n1) {}
  std::string scheme_name() const override { return rows_->scheme_name(); }
  std::string kernel_table() const override { return rows_->kernel_table(); }
  uint64_t weight_bytes() const override { return rows_->weight_bytes(); }

  void forward(const float* x, int64_t m, float* y, ExecContext& ctx) const override {
    Workspace& ws = ctx.workspace();
    float* whole = ws.floats(kWsTpGathered, m * k_);
    std::fill(whole, whole + m * k_, 0.0f);
    const int64_t in = in_features();
    for (int64_t r = 0; r < m; ++r) {
      const float* src = x + r * in;
      for (const auto& [b, e] : cols_) {
        std::memcpy(whole + r * k_ + b, src, static_cast<size_t>(e - b) * sizeof(float));
        src += e - b;
      }
    }
    const Status st = comm_->all_reduce_sum(whole, m * k_);
    if (!st.is_ok()) comm_->abort("gathering a row-parallel input failed: " + st.to_string());
    const int64_t n = n1_ - n0_, out = out_features();
    float* mine = ws.floats(kWsTpRows, m * n);
    rows_->forward(whole, m, mine, ctx);
    std::fill(y, y + m * out, 0.0f);
    for (int64_t r = 0; r < m; ++r) {
      std::memcpy(y + r * out + n0_, mine + r * n, static_cast<size_t>(n) * sizeof(float));
    }
  }

 private:
  std::unique_ptr<Linear> rows_;
  Comm* comm_;
  int64_t k_;
  Ranges cols_;
  int64_t n0_, n1_;
};

}  // namespace

std::unique_ptr<Linear> make_gathered_row_parallel(std::unique_ptr<Linear> rows, Comm* comm,
                                                   int64_t k, const Ranges& cols, int64_t out,
                                                   int64_t n0, int64_t n1) {
  int64_t in = 0;
  for (const auto& [b, e] : cols) in += e - b;
  return std::make_unique<GatheredRowParallel>(std::move(rows), comm, k, cols, out, n0, n1, in);
}

Ranges scaled(const Ranges& items, int64_t per, int64_t offset) {
  Ranges out;
  for (const auto& [b, e] : items) out.emplace_back(offset + b * per, offset + e * per);
  return out;
}

}  // namespace mx
