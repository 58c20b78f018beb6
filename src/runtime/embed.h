// Sentence embeddings from a decoder: the final-normed hidden states of each input, pooled
// (the last token's, as Qwen3-Embedding is trained, or the mean over tokens) and, when asked,
// scaled to unit length. Inputs run together, as few forward passes as the token budget allows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace mx {

enum class Pooling { kLast, kMean };
// "last" or "mean".
Result<Pooling> parse_pooling(const std::string& name);
const char* pooling_name(Pooling p);

// Tokens of one forward pass at most; longer inputs run alone.
constexpr int64_t kEmbedBatchTokens = 4096;

// One vector of hidden_size per input, in order. Inputs must be non-empty and fit the
// model's context.
Result<std::vector<std::vector<float>>> embed_inputs(
    DecoderModel& model, const std::vector<std::vector<int32_t>>& inputs, Pooling pooling,
    bool normalize);

}  // namespace mx
