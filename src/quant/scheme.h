// Quantization schemes: one row each (name, weight and activation formats, dual level, the
// msmodelslim type string), the MX weight container, and activation buffers in a scheme's
// input format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/minifloat.h"
#include "formats/mx_block.h"

namespace mx {

class ThreadPool;

// kW4A8Mxfp4Int8: MXFP4 weights meeting activations as llama.cpp gives them to MXFP4 blocks
// (ggml's Q8_0: int8 codes with a scale amax / 127 per 32, rounded to FP16 as ggml stores
// it), through the W4A4 kernels' exact integer dot. Its weights are W4A8_MXFP's; an export of
// them loads back as w4a8_mxfp4.
enum class Scheme { kBf16, kW8A8Mxfp8, kW4A8Mxfp4, kW4A4Mxfp4, kW4A4Mxfp4Dual, kW4A8Mxfp4Int8 };

struct SchemeInfo {
  Scheme scheme;
  std::string_view name;          // "w8a8_mxfp8"
  std::string_view offline_type;  // msmodelslim type string, "FLOAT" for bf16
  ElemFormat weight;
  ElemFormat activation;  // when not int8_act
  bool dual;
  bool int8_act = false;
};

const SchemeInfo& scheme_info(Scheme s);
std::optional<Scheme> scheme_from_name(std::string_view name);
// --quantization values: mxfp8 (W8A8), mxfp_w4a8, mxfp4 (dual-level W4A4), and scheme names.
std::optional<Scheme> scheme_from_quantization_flag(std::string_view flag);
std::optional<Scheme> scheme_from_offline_type(std::string_view type);

// A weight [n, k] in an MX scheme: codes [n, row_bytes], E8M0 scales [n, ceil(k/32)], and for
// dual level FP32 chunk scales [n, ceil(k/512)].
struct MxWeights {
  Scheme scheme = Scheme::kW8A8Mxfp8;
  int64_t n = 0, k = 0;
  // Block Hadamard rotation along k (formats/hadamard.h) the rows were quantized after, 0 for
  // none: activations meeting them are rotated by the same blocks before they are quantized.
  int64_t rotation = 0;
  Tensor codes, scales, chunk_scales;
  int64_t row_bytes() const;
  uint64_t bytes() const;
};

// Quantizes a float weight (BF16, F16 or F32) [n, k] online, rows split across `pool` when
// one is given.
Result<MxWeights> quantize_weight(const Tensor& w, Scheme scheme, ScaleRule rule,
                                  const std::string& name, ThreadPool* pool = nullptr,
                                  int64_t rotation = 0);
// Whether `rotation` (0: none) is a rotation block offered; the error names the weight.
Status check_rotation(int64_t rotation, const std::string& name);
// Stacks weights of one scheme and width along n (q/k/v, gate/up, experts).
Result<MxWeights> stack_mx_weights(const std::vector<MxWeights>& parts, const std::string& name);
// Dequantizes to FP32 [n, k], rotated back (the reference of the tests, and a quantized
// router gate).
Tensor dequantize_weight(const MxWeights& w);

// The format of activation rows that one layer hands another (a dispatcher, an expert bank):
// FP32 (BF16 on the wire between ranks), or quantized to an MX scheme's activation format.
class RowFormat {
 public:
  static RowFormat f32() { return RowFormat(std::nullopt); }
  // Rows in `s`'s activation format; s is an MX scheme, never kBf16. `rotation`: the block
  // Hadamard rotation applied to each row before it is quantized (0: none).
  static RowFormat mx(Scheme s, int64_t rotation = 0);
  bool quantized() const { return mx_.has_value(); }
  // The MX scheme whose activation format quantized rows are in.
  Scheme scheme() const;
  int64_t rotation() const { return rotation_; }
  bool operator==(const RowFormat&) const = default;

 private:
  explicit RowFormat(std::optional<Scheme> s, int64_t rotation = 0) : mx_(s), rotation_(rotation) {}
  std::optional<Scheme> mx_;
  int64_t rotation_ = 0;
};

// Rows of activations, either FP32 or quantized to a scheme's input format: MX codes and E8M0
// scales, or (int8) int8 codes and their scales per 32, the last block zero-padded.
struct ActRows {
  bool quantized = false;
  ElemFormat format = ElemFormat::kE4M3;
  bool dual = false;
  bool int8 = false;
  int64_t rotation = 0;  // RowFormat::rotation
  int64_t rows = 0, k = 0, row_bytes = 0;
  std::vector<float> f32;           // [rows, k] when not quantized
  std::vector<uint8_t> codes;       // [rows, row_bytes]
  std::vector<uint8_t> scales;      // [rows, ceil(k/32)] (MX)
  std::vector<float> chunk_scales;  // [rows, ceil(k/512)] when dual
  std::vector<float> int8_scales;   // [rows, ceil(k/32)] when int8
  // Room for r rows. The vectors only grow, so they may hold more than `rows` rows: the
  // rows an execution context keeps are reused from step to step at their largest.
  void resize(int64_t r);
  // Whether these rows are in `format` already.
  bool in_format(RowFormat format) const;
};

// Prepares `out` for rows of width k in `format`.
void act_rows_init(RowFormat format, int64_t k, ScaleRule rule, ActRows* out);
// Quantizes one FP32 row into row `r` of `out` (the scheme's activation format).
void act_rows_quantize(const float* x, int64_t r, ScaleRule rule, ActRows* out);
// Quantizes columns [col0, col0 + n) of row `r` from x[0, n): the same bits as the whole row
// gives them, since blocks (and dual-level chunks) are quantized independently. col0 is a
// multiple of act_rows_unit(*out), and n reaches the row's end or is a multiple of it too.
void act_rows_quantize_cols(const float* x, int64_t r, int64_t col0, int64_t n, ScaleRule rule,
                            ActRows* out);
// The columns that act_rows_quantize_cols quantizes together: 32, or 512 when dual-level.
int64_t act_rows_unit(const ActRows& rows);
// Copies row `src_row` of `src` (same format) into row `dst_row` of `dst`.
void act_rows_copy(const ActRows& src, int64_t src_row, ActRows* dst, int64_t dst_row);

}  // namespace mx
