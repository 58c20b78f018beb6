// Tensor parallelism (--tp-size): every rank runs every layer on the same rows, holding only a
// share of each: its query heads with their KV heads (or the one KV head they read, when there
// are fewer KV heads than ranks), its DeltaNet key heads with their value heads and conv
// channels, a slice of each MLP's and each expert's intermediate width, and a slice of the
// vocabulary for the embedding and lm_head. Column-parallel projections (q/k/v, gate/up, DeltaNet's
// in_proj) keep their rows of the share; row-parallel ones (o_proj, down, out_proj) their columns,
// and their partial outputs are summed over the ranks (ForwardContext::tp), as are the embedding's
// rows (each on one rank). Norms, the router and the shared expert's gate are replicated.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/status.h"
#include "loader/model_config.h"
#include "parallel/comm.h"
#include "quant/linear.h"

namespace mx {

// Half-open index ranges, taken and stacked in order.
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

struct TpOptions {
  Comm* comm = nullptr;  // null: one process
};

// This rank's share (rank 0 of 1: all of it).
struct TpShard {
  int rank = 0, size = 1;
  Comm* comm = nullptr;
  bool on() const { return size > 1; }
  // An even split of n heads.
  std::pair<int64_t, int64_t> heads(int64_t n) const;
  // KV heads (and DeltaNet's key heads): split when there are at least as many as ranks,
  // else the one head that this rank's query (value) heads read, held by size / n ranks.
  std::pair<int64_t, int64_t> kv_heads(int64_t n) const;
  // A width split where blocks of `unit` begin (the last share ends where the width does).
  std::pair<int64_t, int64_t> width(int64_t n, int64_t unit) const;
};

// Fails naming the first head count that `size` ranks cannot split.
Status check_tensor_parallel(const ModelConfig& c, int size);
// Whether a width of n holds at least one block of `unit` a rank.
bool splits_at(int64_t n, int64_t unit, int size);
// Fails naming the width when it holds fewer blocks of `unit` than there are ranks.
Status check_width_split(const std::string& what, int64_t n, int64_t unit, int size);
// The config one rank's forward pass and caches see: its own heads (hidden size, vocabulary
// and layers unchanged; widths come from each layer's weights).
ModelConfig tp_local_config(const ModelConfig& c, const TpShard& s);
// A row-parallel linear whose column shards would cut the stored blocks (a dual-level chunk of
// 512 wider than a rank's heads): every rank gathers the whole input row (a sum in which each
// element has one nonzero term, so exact), computes its `rows` [n0, n1) of the output over the
// whole K, and leaves the other outputs zero for the block's all-reduce. Every output is then
// the dot product one process computes. `cols`: where this rank's input columns sit in the
// whole row of `k` columns.
std::unique_ptr<Linear> make_gathered_row_parallel(std::unique_ptr<Linear> rows, Comm* comm,
                                                   int64_t k, const Ranges& cols, int64_t out,
                                                   int64_t n0, int64_t n1);
// Ranges of `per`-sized items scaled to element ranges.
Ranges scaled(const Ranges& items, int64_t per, int64_t offset = 0);

}  // namespace mx
