// The /v1/embeddings request and reply (OpenAI's shapes, vLLM's `normalize`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/embed.h"
#include "server/openai_protocol.h"

namespace mx {

// OpenAI's limit on the inputs of one request.
constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingsRequest {
  std::vector<std::vector<int32_t>> inputs;
  bool base64 = false;
  int64_t dimensions = 0;  // 0: the model's hidden size
  bool normalize = true;
  int64_t tokens = 0;
};

// Fails with the status and the field named; last-token pooling appends <|endoftext|> where
// the input lacks it.
bool parse_embeddings(const OJson& body, const ProtocolContext& ctx, Pooling pooling,
                      EmbeddingsRequest* r, HttpError* err);
// The reply for pooled, unnormalized vectors: truncated to `dimensions`, then normalized.
OJson embeddings_reply(std::vector<std::vector<float>> vecs, const EmbeddingsRequest& r,
                       const std::string& model);

}  // namespace mx
