// The two stores of a paged cache. KvStore: the keys and values of the full-attention layers,
// in the storage type chosen at construction, which alone knows how a row is written and which
// attention kernel reads it back. RecurrentStore: the conv and delta-rule states of the
// linear-attention layers, one slot per running sequence, with the copies that speculative
// verification and prefix caching take of them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/huge_pages.h"
#include "kernels/attention.h"
#include "loader/model_config.h"

namespace mx {

// How cached keys and values are stored: FP32, what the attention computes in; BF16, half
// the bytes for every step's reads and twice the tokens in the same memory, at the cost of
// rounding each key and value to 8 significant bits; or FP8 (E4M3), a quarter of the bytes:
// each position's key and value row of each KV head takes its own power-of-two scale (the
// OCP MX rule over the row: its largest element lands in [256, 448]), and its elements round
// to 4 significant bits. The scale is computed from the row alone when it is written, so
// results do not depend on what else is in the batch.
enum class KvDtype { kF32, kBF16, kFp8E4M3 };
const char* kv_dtype_name(KvDtype d);
// Cache bytes per key or value element, FP8's row scales included.
double kv_element_bytes(KvDtype d, int64_t head_dim);

// [layer][block][kv_head][slot][head_dim], left uninitialized: a slot is always written before
// attention reads it, and untouched pages of a large cache cost no memory until a sequence
// reaches them.
class KvStore {
 public:
  KvStore(const ModelConfig& c, int32_t num_blocks, int32_t block_size, KvDtype dtype);
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t row() const { return row_; }
  KvDtype dtype() const { return dtype_; }
  // One position's key and value rows (head_dim floats each) of KV head `head`, at `slot`
  // of `block`.
  void write(int64_t layer, int32_t block, int64_t slot, int64_t head, const float* k,
             const float* v);
  // a's rows of KV head `head` attend over the sequence's first `nblk` blocks; `tables` is
  // scratch for 4 * nblk pointers.
  void attend(int64_t layer, const AttentionRows& a, const int32_t* blocks, int64_t nblk,
              int64_t head, const void** tables);

 private:
  size_t offset(int64_t layer, int32_t block) const {
    return static_cast<size_t>((layer * num_blocks_ + block) * block_size_ * row_);
  }
  size_t scale_offset(int64_t layer, int32_t block) const {
    return static_cast<size_t>((layer * num_blocks_ + block) * block_size_ * kv_heads_);
  }
  int32_t num_blocks_, block_size_;
  int64_t row_, kv_heads_, head_dim_;
  KvDtype dtype_;
  std::unique_ptr<float[]> k_, v_;
  std::unique_ptr<uint16_t[]> k16_, v16_;
  std::unique_ptr<uint8_t[]> k8_, v8_;
  std::unique_ptr<float[]> ks_, vs_;  // FP8: each row's scale, [layer][block][kv_head][slot]
};

// A linear-attention layer's state per sequence slot: the conv inputs [kernel - 1, conv_dim]
// then the delta-rule state [nv, dk, dv], FP32, indexed by layer so that full-attention
// layers leave their part untouched (and unpaged). Empty for a model without such layers.
class RecurrentStore {
 public:
  RecurrentStore(const ModelConfig& c, int32_t slots);
  int32_t slots() const { return slots_; }
  float* conv_state(int64_t layer, int32_t slot) {
    return rec_.get() + (layer * slots_ + slot) * rec_row_;
  }
  float* delta_state(int64_t layer, int32_t slot) { return conv_state(layer, slot) + conv_row_; }
  uint64_t slot_bytes() const;  // one sequence's state, all layers

  // The state after each position of a verified slice (SeqSlice::keep_states), so that
  // rejected positions roll back by a copy: room for `positions` per slot.
  void reserve_state_steps(int32_t positions);
  int32_t state_steps() const { return state_steps_; }
  float* kept_state(int64_t layer, int32_t slot, int64_t p) {
    return kept_.get() + ((layer * slots_ + slot) * state_steps_ + p) * rec_row_;
  }
  void restore_state(int32_t slot, int64_t p);

  // Saved states apart from the slots (prefix caching): a slot's whole state copied in
  // (save_state) or out (load_state).
  void reserve_saved_states(int32_t entries);
  int32_t saved_states() const { return saved_; }
  void save_state(int32_t slot, int32_t entry);
  void load_state(int32_t entry, int32_t slot);

 private:
  int32_t slots_;
  int64_t conv_row_ = 0, rec_row_ = 0;  // floats per (layer, slot)
  int64_t linear_layers_ = 0, layers_ = 0;
  std::vector<bool> linear_;  // per layer
  HugeArray<float> rec_;      // read and written whole every step
  int32_t state_steps_ = 0;
  HugeArray<float> kept_;  // [layer][slot][position][rec_row]
  int32_t saved_ = 0;
  HugeArray<float> saved_states_;  // [layer][entry][rec_row]
};

}  // namespace mx
