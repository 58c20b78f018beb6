// How stored weights become the model's modules: layers ask for linears and expert banks by
// Hugging Face name; the loader reads the stored weights through the WeightSource seam
// (loader/weight_source.h), checks that a packed module's shards agree, and hands them to the
// quantization method that takes them (quant/quant_method.h: MX, ggml blocks or BF16).
// Nothing above this file branches on formats.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loader/weight_source.h"
#include "model/packed_modules.h"
#include "model/tensor_parallel.h"
#include "parallel/dispatch.h"
#include "quant/linear.h"
#include "quant/quant_method.h"

namespace mx {

struct Embedding;

// A module the loader built and the weights it read, for calibration (model/calibrate.h): a
// linear's weights in row order, or an expert bank's gate, up and down, expert by expert.
struct LoadedModule {
  const Linear* linear = nullptr;
  const ExpertBank* bank = nullptr;
  std::vector<std::string> weights;  // tensor names
};

// What to do with weights that are not already in an MX scheme (QuantPlan), and which of them
// this process loads.
struct WeightPlan : QuantPlan {
  // Which shards each packed module stacks (the architecture's table merged with the generic).
  PackedModules packed = generic_packed_modules();
  // Expert parallelism: this rank loads only its contiguous share of each bank's experts.
  int ep_rank = 0, ep_size = 1;
  // Tensor parallelism: this rank's heads and widths (model/tensor_parallel.h); with
  // tp_whole_experts (--ep-size equal to --tp-size), each bank by whole experts instead.
  TpShard tp;
  bool tp_whole_experts = false;
  // Told of every linear and expert bank built (null: nobody listens).
  std::function<void(const LoadedModule&)> on_module;
};

// A float tensor (BF16, F16 or F32) as FP32; fails naming `name` for any other dtype.
Result<Tensor> float_tensor_f32(const Tensor& t, const std::string& name);

class WeightLoader {
 public:
  WeightLoader(const WeightSource& src, const WeightPlan& plan) : src_(src), plan_(plan) {}

  // A plain tensor with a checked shape.
  Result<Tensor> get(const std::string& name, const Shape& shape) const;
  // A norm's weight [n] as FP32, whatever float type it is stored in.
  Result<Tensor> norm(const std::string& name, int64_t n) const;
  // Any float tensor of a checked shape as FP32.
  Result<Tensor> floats(const std::string& name, const Shape& shape) const;
  bool has(const std::string& name) const { return src_.has(name); }
  const TpShard& tp() const { return plan_.tp; }

  // One matmul over modules stacked along the output (a packed module such as qkv_proj):
  // module i has out_dims[i] rows of width `in`. `keep_float` keeps the stored precision under
  // online quantization (router gate, lm_head). Offline, every shard must carry one type.
  Result<std::unique_ptr<Linear>> linear(const std::vector<std::string>& modules,
                                         const std::vector<int64_t>& out_dims, int64_t in,
                                         const std::string& packed_name,
                                         bool keep_float = false) const;
  // Rows [begin, end) of `module` [out, in] (a vocabulary-parallel lm_head's share).
  Result<std::unique_ptr<Linear>> linear_rows(const std::string& module, int64_t out, int64_t in,
                                              int64_t begin, int64_t end, const std::string& name,
                                              bool keep_float) const;
  // The row ranges of `module` [out, in], stacked in the order given (a load-time reorder of
  // interleaved rows).
  Result<std::unique_ptr<Linear>> linear_row_ranges(
      const std::string& module, int64_t out, int64_t in,
      const std::vector<std::pair<int64_t, int64_t>>& ranges, const std::string& name,
      bool keep_float) const;
  // A tensor-parallel share of the modules stacked along the output: of module i only the
  // rows `rows[i]` (in order), and of every row only the columns `cols` (empty: all of them).
  // Columns must begin where the stored blocks do (MX blocks, the dual-level chunk, ggml
  // blocks); row_parallel() chooses another split where they would not.
  Result<std::unique_ptr<Linear>> shard(const std::vector<std::string>& modules,
                                        const std::vector<int64_t>& out_dims, int64_t in,
                                        const std::vector<Ranges>& rows, const Ranges& cols,
                                        const std::string& name, bool keep_float = false) const;
  // Where column shards of `module` [out, in] may begin: the stored block (ggml), the MX block
  // (and the dual-level chunk), 32 for float weights (the online schemes' block), widened to
  // an online dual-level scheme's chunk and to the rotation's blocks.
  Result<int64_t> column_unit(const std::string& module, int64_t out, int64_t in) const;
  // The row-parallel share of `module` [out, in]: rank r's input columns are cols[r]. Split
  // along K where every rank's columns begin on the stored blocks (partial sums, added by the
  // block's all-reduce); otherwise over the output rows, the input gathered whole
  // (make_gathered_row_parallel).
  Result<std::unique_ptr<Linear>> row_parallel(const std::string& module, int64_t out, int64_t in,
                                               const std::vector<Ranges>& cols,
                                               const std::string& name) const;
  // The modules that the plan's table stacks into `name` of `prefix`.
  std::vector<std::string> packed_modules(const std::string& prefix, const std::string& name,
                                          size_t count) const;
  // The packed module `name` of `prefix` ("...self_attn", "qkv_proj") from its shards as the
  // plan's table lists them, shard i with out_dims[i] rows.
  Result<std::unique_ptr<Linear>> packed(const std::string& prefix, const std::string& name,
                                         const std::vector<int64_t>& out_dims, int64_t in,
                                         bool keep_float = false) const;
  // The router gate [experts, hidden], FP32 logits: computed as stored, or in the MX scheme a
  // checkpoint quantized it to (never read without its scales).
  Result<std::unique_ptr<Linear>> router(const std::string& module, int64_t experts,
                                         int64_t hidden) const;
  // The expert bank of `prefix` ("model.layers.3.mlp"): experts.E.{gate,up,down}_proj, only
  // the experts of this rank's share (all of them in one process), the first of which goes to
  // `first_expert`. Under tensor parallelism, each expert's share of the intermediate width.
  Result<std::unique_ptr<ExpertBank>> experts(const std::string& prefix, int64_t num_experts,
                                              int64_t inter, int64_t hidden,
                                              int64_t* first_expert = nullptr) const;
  // Whether tensor parallelism split any bank by whole experts (too narrow for its width to be
  // split where its blocks begin): the other ranks' experts are then read elsewhere.
  bool whole_experts() const { return whole_experts_; }
  // The token embedding [vocab, hidden]: BF16, or ggml blocks dequantized a row at a time.
  Status embedding(const std::string& module, int64_t vocab, int64_t hidden, Embedding* out) const;

 private:
  Result<std::vector<StoredWeight>> parts_of(const std::vector<std::string>& modules,
                                             const std::vector<int64_t>& out_dims, int64_t in,
                                             const std::string& packed_name) const;
  Result<std::unique_ptr<Linear>> linear_of(const std::vector<StoredWeight>& parts,
                                            const std::string& packed_name, bool keep_float) const;

  const WeightSource& src_;
  WeightPlan plan_;
  mutable bool whole_experts_ = false;
};

}  // namespace mx
