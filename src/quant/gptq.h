// GPTQ (Frantar et al., arXiv 2210.17323) into the MX schemes. Each weight row is quantized a
// column at a time along K, and each column's rounding error is carried onto the columns not
// yet quantized through the inverse Hessian of the layer's inputs (H = sum of x x^T over the
// calibration rows), so the layer's output on those inputs moves as little as the format
// allows. The E8M0 scale of a block of 32 (and the FP32 scale of a dual-level chunk of 512)
// is chosen from the row's values when the column loop reaches the block, after the errors of
// the earlier columns were added to it: the scales see the GPTQ error.
//
// The numeric contract, which the tests' float64 reference follows: a value is quantized as
// the codec quantizes it (formats/mx_block.h) from its current value rounded to FP32; its
// error is divided by U[i][i] and subtracted, times U[i][j], from every later column j, where
// U is the upper Cholesky factor of (H + damp * mean(diag H) * I)^-1 (Hinv = U^T U).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/scheme.h"

namespace mx {

class ThreadPool;

struct GptqOptions {
  // Added to the Hessian's diagonal as a fraction of its mean, so that it is positive definite
  // even for inputs that never varied.
  double damp = 0.01;
  // Columns in order of decreasing diag(H) (the inputs with the most energy first). A block's
  // columns are then no longer reached together, so its scale is chosen up front from the
  // unquantized row ("static groups").
  bool act_order = false;
  // A block's E8M0 exponent is the codec's or the one above it, whichever leaves the smaller
  // GPTQ loss over the block (the errors of its columns weighted as GPTQ weighs them); the
  // codec's floor rule may clip a block's largest values, the one above never does. Blocks
  // whose scales are chosen up front (act_order) take the codec's.
  bool scale_search = true;
  // Columns whose errors reach the rest of the row together (lazy batch updates): a multiple
  // of 32, and a divisor of 512 so that dual-level chunks start on a batch.
  int64_t batch = 128;
};

// The sum of x x^T over FP32 rows of width k, in double.
class Hessian {
 public:
  explicit Hessian(int64_t k);
  int64_t k() const { return k_; }
  int64_t rows() const { return rows_; }
  // Adds rows x [m, k]; splits the work over `pool` (may be null).
  void add(const float* x, int64_t m, ThreadPool* pool);
  void add(const Hessian& other);
  // [k, k], symmetric.
  std::vector<double> matrix() const;

 private:
  int64_t k_, rows_ = 0;
  std::vector<double> upper_;  // [k, k], the upper triangle filled
};

// The sum of x y^T over pairs of FP32 rows of width k, in double: [k, k], row i for x's i.
class CrossMoments {
 public:
  explicit CrossMoments(int64_t k) : k_(k), c_(static_cast<size_t>(k * k), 0.0) {}
  int64_t k() const { return k_; }
  void add(const float* x, const float* y, int64_t m, ThreadPool* pool);
  void add(const CrossMoments& other);
  const std::vector<double>& matrix() const { return c_; }

 private:
  int64_t k_;
  std::vector<double> c_;
};

// Inputs that reach the weights quantized (activation quantization): the weights w' [n, k]
// that, meeting the quantized inputs y, best give what w gives their exact inputs x, in least
// squares damped toward w: w' = w (C + d I) (Hy + d I)^-1, with C = sum x y^T, Hy = sum y y^T
// and d = damp * mean(diag Hy).
// GPTQ then quantizes w' against Hy, and so minimizes |w x - q y| over the calibration rows.
Result<std::vector<float>> input_aware_weights(const float* w, int64_t n, int64_t k,
                                               const std::vector<double>& cross,
                                               const std::vector<double>& hy, double damp,
                                               ThreadPool* pool);

// Quantizes w [n, k] (already rotated when the scheme's activations are) into `scheme` given
// the Hessian h [k, k] of its inputs; rows are split over `pool`. Fails naming `name` when a
// weight is not finite or the damped Hessian is not positive definite.
Result<MxWeights> gptq_quantize(const float* w, int64_t n, int64_t k, const std::vector<double>& h,
                                Scheme scheme, ScaleRule rule, const GptqOptions& opt,
                                ThreadPool* pool, const std::string& name);

// U of the contract above, row-major [k, k] upper triangle (the rest zero), after act_order's
// permutation `perm` of h when given; fails when not positive definite.
Result<std::vector<double>> gptq_inverse_factor(const std::vector<double>& h, int64_t k,
                                                double damp, const std::vector<int64_t>* perm);

}  // namespace mx
