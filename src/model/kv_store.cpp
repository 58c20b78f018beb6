#include "model/kv_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "formats/half.h"
#include "formats/mx_block.h"
#include "kernels/ops.h"

namespace mx {

const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kFp8E4M3:
      return "fp8_e4m3";
    case KvDtype::kF32:
      break;
  }
  return "fp32";
}

double kv_element_bytes(KvDtype d, int64_t head_dim) {
  switch (d) {
    case KvDtype::kBF16:
      return 2.0;
    case KvDtype::kFp8E4M3:
      return 1.0 + 4.0 / static_cast<double>(head_dim);
    case KvDtype::kF32:
      break;
  }
  return 4.0;
}

namespace {

// One key or value row of an FP8 cache: its power-of-two scale by the MX floor rule over the
// whole row, and its elements rounded to nearest even in E4M3 (x / scale is exact). A row
// that is not finite keeps a NaN scale, so attention over it stays NaN as FP32 attention would.
void store_fp8_row(const float* x, int64_t d, uint8_t* codes, float* scale) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t j = 0; j < d; ++j) {
    finite = finite && std::isfinite(x[j]);
    amax = std::max(amax, std::fabs(x[j]));
  }
  if (!finite) {
    for (int64_t j = 0; j < d; ++j) codes[j] = 0;
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const int byte = mx_scale_byte(amax, ElemFormat::kE4M3, ScaleRule::kFloor);
  const float s = std::ldexp(1.0f, byte - 127);
  *scale = s;
  for (int64_t j = 0; j < d; ++j) codes[j] = float_to_e4m3(static_cast<double>(x[j]) / s);
}

}  // namespace

KvStore::KvStore(const ModelConfig& c, int32_t num_blocks, int32_t block_size, KvDtype dtype)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      row_(c.num_kv_heads * c.head_dim),
      kv_heads_(c.num_kv_heads),
      head_dim_(c.head_dim),
      dtype_(dtype) {
  const size_t n = static_cast<size_t>(c.num_layers * num_blocks * block_size * row_);
  if (dtype == KvDtype::kBF16) {
    k16_ = std::make_unique_for_overwrite<uint16_t[]>(n);
    v16_ = std::make_unique_for_overwrite<uint16_t[]>(n);
  } else if (dtype == KvDtype::kFp8E4M3) {
    k8_ = std::make_unique_for_overwrite<uint8_t[]>(n);
    v8_ = std::make_unique_for_overwrite<uint8_t[]>(n);
    const size_t rows = static_cast<size_t>(c.num_layers * num_blocks * block_size * kv_heads_);
    ks_ = std::make_unique_for_overwrite<float[]>(rows);
    vs_ = std::make_unique_for_overwrite<float[]>(rows);
  } else {
    k_ = std::make_unique_for_overwrite<float[]>(n);
    v_ = std::make_unique_for_overwrite<float[]>(n);
  }
}

void KvStore::write(int64_t layer, int32_t block, int64_t slot, int64_t head, const float* k,
                    const float* v) {
  const int64_t d = head_dim_;
  const size_t at = offset(layer, block) + static_cast<size_t>((head * block_size_ + slot) * d);
  if (dtype_ == KvDtype::kBF16) {
    for (int64_t j = 0; j < d; ++j) {
      k16_[at + static_cast<size_t>(j)] = float_to_bf16(k[j]);
      v16_[at + static_cast<size_t>(j)] = float_to_bf16(v[j]);
    }
  } else if (dtype_ == KvDtype::kFp8E4M3) {
    const size_t srow = scale_offset(layer, block) + static_cast<size_t>(head * block_size_ + slot);
    store_fp8_row(k, d, k8_.get() + at, ks_.get() + srow);
    store_fp8_row(v, d, v8_.get() + at, vs_.get() + srow);
  } else {
    std::memcpy(k_.get() + at, k, static_cast<size_t>(d) * sizeof(float));
    std::memcpy(v_.get() + at, v, static_cast<size_t>(d) * sizeof(float));
  }
}

void KvStore::attend(int64_t layer, const AttentionRows& a, const int32_t* blocks, int64_t nblk,
                     int64_t head, const void** tables) {
  const size_t head_block = static_cast<size_t>(block_size_ * head_dim_);
  const size_t h0 = static_cast<size_t>(head) * head_block;
  if (dtype_ == KvDtype::kFp8E4M3) {
    auto** kb = reinterpret_cast<const uint8_t**>(tables);
    auto** vb = kb + nblk;
    auto** ks = reinterpret_cast<const float**>(tables + 2 * nblk);
    auto** vs = ks + nblk;
    for (int64_t j = 0; j < nblk; ++j) {
      kb[j] = k8_.get() + offset(layer, blocks[j]) + h0;
      vb[j] = v8_.get() + offset(layer, blocks[j]) + h0;
      ks[j] = ks_.get() + scale_offset(layer, blocks[j]) + static_cast<size_t>(head * block_size_);
      vs[j] = vs_.get() + scale_offset(layer, blocks[j]) + static_cast<size_t>(head * block_size_);
    }
    attention_group_paged_fp8(a, kb, vb, ks, vs);
  } else if (dtype_ == KvDtype::kBF16) {
    auto** kb = reinterpret_cast<const uint16_t**>(tables);
    auto** vb = kb + nblk;
    for (int64_t j = 0; j < nblk; ++j) {
      kb[j] = k16_.get() + offset(layer, blocks[j]) + h0;
      vb[j] = v16_.get() + offset(layer, blocks[j]) + h0;
    }
    attention_group_paged_bf16(a, kb, vb);
  } else {
    auto** kb = reinterpret_cast<const float**>(tables);
    auto** vb = kb + nblk;
    for (int64_t j = 0; j < nblk; ++j) {
      kb[j] = k_.get() + offset(layer, blocks[j]) + h0;
      vb[j] = v_.get() + offset(layer, blocks[j]) + h0;
    }
    attention_group_paged(a, kb, vb);
  }
}

RecurrentStore::RecurrentStore(const ModelConfig& c, int32_t slots) : slots_(slots) {
  for (LayerKind k : c.layer_kinds) {
    linear_.push_back(k == LayerKind::kLinearAttention);
    linear_layers_ += k == LayerKind::kLinearAttention ? 1 : 0;
  }
  if (linear_layers_ == 0) return;
  layers_ = c.num_layers;
  const int64_t conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim +
                           c.linear_num_value_heads * c.linear_value_head_dim;
  conv_row_ = (c.linear_conv_kernel_dim - 1) * conv_dim;
  rec_row_ = conv_row_ + c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim;
  // A slot is reset when its sequence starts.
  rec_ = HugeArray<float>(static_cast<size_t>(layers_ * slots_ * rec_row_));
}

uint64_t RecurrentStore::slot_bytes() const {
  return static_cast<uint64_t>(linear_layers_ * rec_row_) * sizeof(float);
}

void RecurrentStore::reserve_state_steps(int32_t positions) {
  if (rec_row_ == 0 || positions <= state_steps_) return;
  state_steps_ = positions;
  kept_ = HugeArray<float>(static_cast<size_t>(layers_ * slots_ * positions * rec_row_));
}

void RecurrentStore::restore_state(int32_t slot, int64_t p) {
  if (rec_row_ == 0) return;
  MX_CHECK(p >= 0 && p < state_steps_);
  for (int64_t l = 0; l < layers_; ++l) {
    if (!linear_[static_cast<size_t>(l)]) continue;
    std::memcpy(conv_state(l, slot), kept_state(l, slot, p),
                static_cast<size_t>(rec_row_) * sizeof(float));
  }
}

void RecurrentStore::reserve_saved_states(int32_t entries) {
  if (rec_row_ == 0 || entries <= saved_) return;
  saved_ = entries;
  saved_states_ = HugeArray<float>(static_cast<size_t>(layers_ * entries * rec_row_));
}

void RecurrentStore::save_state(int32_t slot, int32_t entry) {
  MX_CHECK(entry >= 0 && entry < saved_);
  for (int64_t l = 0; l < layers_; ++l) {
    if (!linear_[static_cast<size_t>(l)]) continue;
    std::memcpy(saved_states_.get() + (l * saved_ + entry) * rec_row_, conv_state(l, slot),
                static_cast<size_t>(rec_row_) * sizeof(float));
  }
}

void RecurrentStore::load_state(int32_t entry, int32_t slot) {
  MX_CHECK(entry >= 0 && entry < saved_);
  for (int64_t l = 0; l < layers_; ++l) {
    if (!linear_[static_cast<size_t>(l)]) continue;
    std::memcpy(conv_state(l, slot), saved_states_.get() + (l * saved_ + entry) * rec_row_,
                static_cast<size_t>(rec_row_) * sizeof(float));
  }
}

}  // namespace mx
