// The one seam between checkpoints and the model: for a checkpoint of any kind (a Hugging
// Face safetensors directory, an msmodelslim offline directory, a GGUF file) it answers which
// tensors exist under their Hugging Face names, with their stored encoding, shape and bytes
// (views into the mapped files, no copy). What each kind names its tensors, how it stores
// scales and how it lays out expert banks is known here and nowhere above.
//
// Every tensor handed out is recorded; after the model is built, check_all_used() fails on a
// tensor no module consumed (a bias, a rotation matrix), unless a documented skip rule covers
// it, so a checkpoint is never run with part of it silently ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/ggml_types.h"
#include "loader/model_config.h"
#include "loader/quant_description.h"

namespace mx {

enum class WeightEncoding {
  kFloat,  // F32 / F16 / BF16 [out, in]
  kMx,     // msmodelslim MX: codes, E8M0 scales per 32 (and FP32 per 512 when dual)
  kGgml,   // ggml blocks: U8 [out, row_bytes], rows independent along `in`
};

// The weight of one linear module ("model.layers.0.self_attn.q_proj") as stored.
struct StoredWeight {
  std::string name;  // the weight tensor's name
  WeightEncoding encoding = WeightEncoding::kFloat;
  int64_t out = 0, in = 0;
  // kFloat: [out, in] float; kMx: codes [out, in] E4M3 or [out, ceil(in/2)] packed E2M1;
  // kGgml: U8 [out, row_bytes].
  Tensor data;
  Tensor scale;                           // kMx: U8 [out, ceil(in/32)]
  Tensor dual_scale;                      // kMx dual level: F32 [out, ceil(in/512)]
  QuantType mx_type = QuantType::kFloat;  // kMx
  GgmlType ggml = GgmlType::kF32;         // kGgml
  // A short description for messages: "FLOAT", "W8A8_MXFP8", "Q4_K".
  std::string type_name() const;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The path the source was opened from.
  virtual const std::string& label() const = 0;
  // "safetensors", "msmodelslim" or "gguf".
  virtual std::string_view kind() const = 0;
  // Every tensor under its Hugging Face name, in name order.
  virtual std::vector<std::string> names() const = 0;
  // The same with fused expert banks seen one tensor per expert (what an exporter that saves
  // experts per expert, as msmodelslim does, writes); tensor() answers each.
  virtual std::vector<std::string> logical_names() const { return names(); }
  virtual bool has(const std::string& name) const = 0;
  // A tensor stored in a plain dtype (norms; embeddings of safetensors checkpoints).
  virtual Result<Tensor> tensor(const std::string& name) const = 0;
  // The weight of `module` (without ".weight"), which the config says is [out, in].
  virtual Result<StoredWeight> weight(const std::string& module, int64_t out, int64_t in) const = 0;
  // The stored type of a tensor for reports and checks: "BF16", "W8A8_MXFP8", "Q4_K".
  virtual std::string stored_type(const std::string& name) const = 0;
  // The offline description (msmodelslim only).
  virtual const QuantDescription* quant_description() const { return nullptr; }

  // Fails naming the first tensor that no module consumed and no skip rule covers (mtp.*,
  // vision towers: a text-only model never reads them). `skipped` gets the names skipped.
  // `elsewhere`: tensors another process loads (expert parallelism), neither used nor skipped.
  Status check_all_used(std::vector<std::string>* skipped = nullptr,
                        const std::function<bool(const std::string&)>& elsewhere = {}) const;

 protected:
  void mark_used(const std::string& name) const { used_.insert(name); }

 private:
  mutable std::set<std::string> used_;
};

// The most experts a bank may have for its fused tensor to be seen as per-expert views.
inline constexpr int64_t kMaxExperts = 4096;

// Whether a tensor name is one that a text-only model knowingly leaves unread.
bool is_skippable_tensor(const std::string& name);

// Each kind's source, for the format registry (loader/checkpoint_format.h) and the tests.
Result<std::unique_ptr<WeightSource>> open_safetensors_source(const std::string& dir);
Result<std::unique_ptr<WeightSource>> open_msmodelslim_source(const std::string& dir);

}  // namespace mx
