// GPTQ over a whole model (quant/gptq.h), layer by layer as the method prescribes: the model
// runs in floating point on the calibration windows, each layer in turn gathers the inputs of
// its linears and experts, its weights are quantized with the Hessians of those inputs, and
// the layer is rebuilt from the quantized weights before the next one gathers, so every
// layer is calibrated on what the quantized layers below it give it.
//
// Experts take Hessians of the rows routed to them; one that saw fewer rows than its input
// width takes the Hessian of every row its layer routed. An expert's down projection sees
// SwiGLU(gate x, up x) of its quantized gate and up (of the stored ones when it has too few
// rows of its own).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/gptq.h"
#include "quant/scheme.h"

namespace mx {

struct CalibrationOptions {
  GptqOptions gptq;
  ScaleRule rule = ScaleRule::kFloor;
  // Block Hadamard rotation along K (0: none): weights and inputs are rotated before GPTQ.
  int64_t rotation = 0;
  // The scheme of each weight tensor ("model.layers.0.mlp.down_proj.weight"); nullopt keeps
  // it as stored (what the export keeps FLOAT).
  std::function<std::optional<Scheme>(const std::string& name)> scheme_of;
  // Quantize the weights for the inputs as the scheme's activation quantization gives them
  // (quant/gptq.h's input_aware_weights) rather than for the exact inputs. With few rows per
  // expert the fit follows the calibration set's own quantization noise, so it is asked for.
  bool input_aware = false;
  // Fit the linears that read a layer's input (q/k/v, gate/up, experts' gate/up) and the
  // experts' down projections to what the unquantized model gives them (as GPTAQ, arXiv
  // 2504.02692): the weights meeting the quantized model's inputs answer, in least squares
  // before GPTQ, as the unquantized weights answer the unquantized model's, so the error of
  // the layers below is corrected where it can be. Runs the unquantized model beside. Like
  // input_aware, only where a module saw 32 calibration rows per input or more.
  bool float_targets = true;
  int threads = 1;
  // After each layer (done, total).
  std::function<void(int64_t, int64_t)> progress;
};

struct CalibrationResult {
  // Every weight GPTQ quantized, by tensor name, its rotation recorded.
  std::map<std::string, MxWeights> weights;
  int64_t tokens = 0;
  // Experts that took their layer's Hessian for want of rows of their own.
  int64_t pooled_experts = 0;
};

// `windows`: token ids of the calibration text, each window run as one sequence from
// position 0. The checkpoint at `dir` must be a floating-point Hugging Face one.
Result<CalibrationResult> gptq_calibrate(const std::string& dir,
                                         const std::vector<std::vector<int32_t>>& windows,
                                         const CalibrationOptions& opt);

}  // namespace mx
