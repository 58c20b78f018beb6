#include "runtime/embed.h"

#include <cmath>

namespace mx {

Result<Pooling> parse_pooling(const std::string& name) {
  if (name == "last") return Pooling::kLast;
  if (name == "mean") return Pooling::kMean;
  return invalid_argument("pooling '" + name + "': expected last or mean");
}

const char* pooling_name(Pooling p) { return p == Pooling::kLast ? "last" : "mean"; }

namespace {

// Inputs [begin, end) in one pass, each in its own block and recurrent-state slot.
Status embed_batch(DecoderModel& model, const std::vector<std::vector<int32_t>>& inputs,
                   size_t begin, size_t end, Pooling pooling,
                   std::vector<std::vector<float>>* out) {
  const ModelConfig& c = model.config();
  const int64_t hid = c.hidden_size;
  int64_t longest = 0, rows = 0;
  for (size_t i = begin; i < end; ++i) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(inputs[i].size()));
    rows += static_cast<int64_t>(inputs[i].size());
  }
  const int32_t n = static_cast<int32_t>(end - begin);
  PagedKv kv(c, n, static_cast<int32_t>(longest), model.kv_dtype(), n);
  std::vector<int32_t> blocks(static_cast<size_t>(n));
  std::vector<SeqSlice> slices;
  for (int32_t b = 0; b < n; ++b) {
    blocks[static_cast<size_t>(b)] = b;
    SeqSlice s;
    s.tokens = inputs[begin + static_cast<size_t>(b)].data();
    s.count = static_cast<int64_t>(inputs[begin + static_cast<size_t>(b)].size());
    s.start = 0;
    s.blocks = &blocks[static_cast<size_t>(b)];
    s.logits = SeqSlice::Logits::kAll;
    s.slot = b;
    slices.push_back(s);
  }
  std::vector<float> hidden(static_cast<size_t>(rows * hid));
  MX_RETURN_IF_ERROR(model.forward_hidden(slices, kv, hidden.data()));
  int64_t row = 0;
  for (const SeqSlice& s : slices) {
    std::vector<double> acc(static_cast<size_t>(hid), 0.0);
    const int64_t first = pooling == Pooling::kLast ? s.count - 1 : 0;
    for (int64_t t = first; t < s.count; ++t) {
      const float* h = hidden.data() + (row + t) * hid;
      for (int64_t d = 0; d < hid; ++d) acc[static_cast<size_t>(d)] += h[d];
    }
    const double count = static_cast<double>(s.count - first);
    std::vector<float> v(static_cast<size_t>(hid));
    for (int64_t d = 0; d < hid; ++d) {
      v[static_cast<size_t>(d)] = static_cast<float>(acc[static_cast<size_t>(d)] / count);
    }
    out->push_back(std::move(v));
    row += s.count;
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<std::vector<float>>> embed_inputs(
    DecoderModel& model, const std::vector<std::vector<int32_t>>& inputs, Pooling pooling,
    bool normalize) {
  const int64_t context = model.config().max_position_embeddings;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) return invalid_argument("input " + std::to_string(i) + " is empty");
    if (static_cast<int64_t>(inputs[i].size()) > context) {
      return invalid_argument(
          "input " + std::to_string(i) + " has " + std::to_string(inputs[i].size()) +
          " tokens, more than the context length of " + std::to_string(context));
    }
  }
  std::vector<std::vector<float>> out;
  for (size_t begin = 0; begin < inputs.size();) {
    size_t end = begin + 1;
    int64_t tokens = static_cast<int64_t>(inputs[begin].size());
    while (end < inputs.size() &&
           tokens + static_cast<int64_t>(inputs[end].size()) <= kEmbedBatchTokens) {
      tokens += static_cast<int64_t>(inputs[end].size());
      ++end;
    }
    MX_RETURN_IF_ERROR(embed_batch(model, inputs, begin, end, pooling, &out));
    begin = end;
  }
  if (normalize) {
    for (std::vector<float>& v : out) {
      double ss = 0;
      for (float x : v) ss += static_cast<double>(x) * x;
      const double inv = ss > 0 ? 1.0 / std::sqrt(ss) : 0.0;
      for (float& x : v) x = static_cast<float>(x * inv);
    }
  }
  return out;
}

}  // namespace mx
