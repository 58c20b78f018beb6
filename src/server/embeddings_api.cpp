// /v1/embeddings: OpenAI's request (input as a string, strings, token ids or lists of them;
// encoding_format float or base64; dimensions) and reply, plus vLLM's `normalize` (default
// true). The vectors come from runtime/embed.h on the engine thread.
#include "server/embeddings_api.h"

#include <cmath>
#include <cstring>

namespace mx {
namespace {

HttpError field(const std::string& name, const std::string& why) {
  return {400, "'" + name + "' " + why, "invalid_request_error", name};
}

std::string base64(const std::vector<float>& v) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian float32, as OpenAI sends
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

bool token_list(const OJson& v, int32_t vocab, std::vector<int32_t>* out) {
  if (!v.is_array() || v.empty()) return false;
  for (const OJson& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) return false;
    out->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return true;
}

bool read_inputs(const OJson& input, const ProtocolContext& ctx, EmbeddingsRequest* r,
                 HttpError* err) {
  const int32_t vocab = ctx.tok->vocab_size();
  auto bad = [&] {
    *err = field("input",
                 "must be a non-empty string, a list of strings, a list of token ids "
                 "or a list of such lists");
    return false;
  };
  if (input.is_string()) {
    r->inputs.push_back(ctx.tok->encode(input.get<std::string>()));
    return true;
  }
  if (!input.is_array() || input.empty()) return bad();
  if (input[0].is_number_integer()) {
    r->inputs.emplace_back();
    return token_list(input, vocab, &r->inputs.back()) || bad();
  }
  if (input.size() > kMaxEmbeddingInputs) {
    *err = field("input", "holds more than " + std::to_string(kMaxEmbeddingInputs) + " inputs");
    return false;
  }
  for (const OJson& x : input) {
    r->inputs.emplace_back();
    if (x.is_string()) {
      r->inputs.back() = ctx.tok->encode(x.get<std::string>());
    } else if (!token_list(x, vocab, &r->inputs.back())) {
      return bad();
    }
  }
  return true;
}

}  // namespace

bool parse_embeddings(const OJson& body, const ProtocolContext& ctx, Pooling pooling,
                      EmbeddingsRequest* r, HttpError* err) {
  if (body.contains("model") && body["model"] != ctx.served_model_name) {
    *err = {
        404,
        "The model '" +
            (body["model"].is_string() ? body["model"].get<std::string>() : body["model"].dump()) +
            "' does not exist",
        "invalid_request_error", "model"};
    return false;
  }
  if (!body.contains("input")) {
    *err = field("input", "is required");
    return false;
  }
  if (!read_inputs(body["input"], ctx, r, err)) return false;
  // Qwen3-Embedding reads the state after its end-of-text token, which its tokenizer appends.
  const std::optional<int32_t> eot = ctx.tok->token_id("<|endoftext|>");
  for (size_t i = 0; i < r->inputs.size(); ++i) {
    std::vector<int32_t>& ids = r->inputs[i];
    if (pooling == Pooling::kLast && eot && (ids.empty() || ids.back() != *eot))
      ids.push_back(*eot);
    if (ids.empty()) {
      *err = field("input", "[" + std::to_string(i) + "] has no tokens");
      return false;
    }
    if (static_cast<int64_t>(ids.size()) > ctx.context) {
      *err = field("input", "[" + std::to_string(i) + "] has " + std::to_string(ids.size()) +
                                " tokens, more than the context length of " +
                                std::to_string(ctx.context));
      return false;
    }
    r->tokens += static_cast<int64_t>(ids.size());
  }
  const std::string fmt = body.value("encoding_format", OJson("float")).is_string()
                              ? body.value("encoding_format", std::string("float"))
                              : std::string();
  if (fmt != "float" && fmt != "base64") {
    *err = field("encoding_format", "must be float or base64");
    return false;
  }
  r->base64 = fmt == "base64";
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    const OJson& d = body["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1) {
      *err = field("dimensions", "must be a positive integer");
      return false;
    }
    r->dimensions = d.get<int64_t>();
  }
  if (body.contains("normalize")) {
    if (!body["normalize"].is_boolean()) {
      *err = field("normalize", "must be a boolean");
      return false;
    }
    r->normalize = body["normalize"].get<bool>();
  }
  return true;
}

OJson embeddings_reply(std::vector<std::vector<float>> vecs, const EmbeddingsRequest& r,
                       const std::string& model) {
  OJson data = OJson::array();
  for (size_t i = 0; i < vecs.size(); ++i) {
    std::vector<float>& v = vecs[i];
    // Matryoshka truncation first, then unit length, as Qwen3-Embedding is used.
    if (r.dimensions > 0 && r.dimensions < static_cast<int64_t>(v.size())) {
      v.resize(static_cast<size_t>(r.dimensions));
    }
    if (r.normalize) {
      double ss = 0;
      for (float x : v) ss += static_cast<double>(x) * x;
      const double inv = ss > 0 ? 1.0 / std::sqrt(ss) : 0.0;
      for (float& x : v) x = static_cast<float>(x * inv);
    }
    OJson e = {{"object", "embedding"}, {"index", i}};
    e["embedding"] = r.base64 ? OJson(base64(v)) : OJson(v);
    data.push_back(std::move(e));
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", r.tokens}, {"total_tokens", r.tokens}}}};
}

}  // namespace mx
