// Qwen3-Next GGUFs (llama.cpp arch `qwen3next`), which no fixture ships: the Qwen3.5 MoE fixture's
// Q8_0 file rewritten as llama.cpp's converter writes Qwen3-Next (conversion/qwen.py,
// Qwen3NextModel): value heads grouped by key head as Hugging Face orders them (Qwen3.5's
// converter tiles them), b and a fused per key-head group into ssm_ba, qkvz either split into
// attn_qkv + attn_gate (files made since 2026-01) or fused per group into ssm_in (before), no
// MTP block and no recurrent_layers key. Both layouts must meet the file's own golden.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/json_util.h"
#include "kernels/ops.h"
#include "loader/gguf.h"
#include "model/model.h"
#include "test_util.h"

namespace mx {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = "tiny-qwen3_5-moe.Q8_0";

struct OutTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
  std::string bytes;
};

// GGUF's little-endian encoding of one metadata value of `type`.
void put_value(std::string* o, GgufValueType type, const GgufValue& v) {
  auto raw = [&](const void* p, size_t n) { o->append(static_cast<const char*>(p), n); };
  auto put = [&](auto x) { raw(&x, sizeof x); };
  switch (type) {
    case GgufValueType::kU8:
      put(static_cast<uint8_t>(v.u));
      break;
    case GgufValueType::kI8:
      put(static_cast<int8_t>(v.i));
      break;
    case GgufValueType::kU16:
      put(static_cast<uint16_t>(v.u));
      break;
    case GgufValueType::kI16:
      put(static_cast<int16_t>(v.i));
      break;
    case GgufValueType::kU32:
      put(static_cast<uint32_t>(v.u));
      break;
    case GgufValueType::kI32:
      put(static_cast<int32_t>(v.i));
      break;
    case GgufValueType::kU64:
      put(static_cast<uint64_t>(v.u));
      break;
    case GgufValueType::kI64:
      put(static_cast<int64_t>(v.i));
      break;
    case GgufValueType::kF32:
      put(static_cast<float>(v.f));
      break;
    case GgufValueType::kF64:
      put(v.f);
      break;
    case GgufValueType::kBool:
      put(static_cast<uint8_t>(v.b));
      break;
    case GgufValueType::kString:
      put(static_cast<uint64_t>(v.str.size()));
      raw(v.str.data(), v.str.size());
      break;
    case GgufValueType::kArray:
      put(static_cast<uint32_t>(v.elem_type));
      put(static_cast<uint64_t>(v.array.size()));
      for (const GgufValue& e : v.array) put_value(o, v.elem_type, e);
      break;
  }
}

void write_gguf(const std::string& path, const std::map<std::string, GgufValue>& meta,
                const std::vector<OutTensor>& tensors) {
  std::string o = "GGUF";
  auto put = [&](auto x) { o.append(reinterpret_cast<const char*>(&x), sizeof x); };
  auto put_str = [&](const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    o += s;
  };
  put(uint32_t{3});
  put(static_cast<uint64_t>(tensors.size()));
  put(static_cast<uint64_t>(meta.size()));
  for (const auto& [k, v] : meta) {
    put_str(k);
    put(static_cast<uint32_t>(v.type));
    put_value(&o, v.type, v);
  }
  uint64_t offset = 0;
  for (const OutTensor& t : tensors) {
    put_str(t.name);
    put(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put(static_cast<uint64_t>(d));
    put(static_cast<uint32_t>(t.type));
    put(offset);
    offset += (t.bytes.size() + 31) / 32 * 32;
  }
  o.resize((o.size() + 31) / 32 * 32, '\0');
  for (const OutTensor& t : tensors) {
    o += t.bytes;
    o.resize((o.size() + 31) / 32 * 32, '\0');
  }
  std::ofstream(path, std::ios::binary) << o;
}

// The fixture as a qwen3next file; `fused_qkvz`: the older layout with ssm_in.
std::string write_as_qwen3next(const GgufFile& f, bool fused_qkvz, const std::string& path) {
  std::map<std::string, GgufValue> meta;
  for (const auto& [k, v] : f.metadata()) {
    const std::string p = "qwen35moe.";
    if (k.rfind(p, 0) != 0) {
      meta[k] = v;
      continue;
    }
    const std::string key = k.substr(p.size());
    if (key == "nextn_predict_layers" || key == "attention.recurrent_layers" ||
        key == "rope.dimension_sections") {
      continue;
    }
    meta["qwen3next." + key] = v;
  }
  meta["general.architecture"].str = "qwen3next";
  meta["qwen3next.block_count"].u = 4;
  meta["qwen3next.block_count"].i = 4;
  auto key = [&](const char* k) { return meta["qwen3next." + std::string(k)].i; };
  const int64_t nk = key("ssm.group_count"), nv = key("ssm.time_step_rank");
  const int64_t dk = key("ssm.state_size"), dv = key("ssm.inner_size") / nv, r = nv / nk;
  // Grouped head j sits at tiled position (j % r) * nk + j / r in the fixture.
  auto tiled = [&](int64_t j) { return (j % r) * nk + j / r; };

  std::map<std::string, const GgufTensorInfo*> by_name;
  for (const GgufTensorInfo& t : f.tensors()) by_name[t.name] = &t;
  auto row_bytes = [](const GgufTensorInfo& t) { return t.bytes / static_cast<uint64_t>(t.ne[1]); };
  // Rows [begin, begin + n) of a stored tensor (a 1-D tensor's elements count as rows).
  auto rows = [&](const GgufTensorInfo& t, int64_t begin, int64_t n) {
    const uint64_t rb = t.ne.size() == 1 ? ggml_row_bytes(t.type, 1) : row_bytes(t);
    return std::string(reinterpret_cast<const char*>(t.data) + begin * rb, n * rb);
  };
  // Value heads [0, nv) of `per_head` rows each, from `first` on, into grouped order.
  auto grouped = [&](const GgufTensorInfo& t, int64_t first, int64_t per_head) {
    std::string out;
    for (int64_t j = 0; j < nv; ++j) out += rows(t, first + tiled(j) * per_head, per_head);
    return out;
  };
  std::vector<OutTensor> out;
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string& n = t.name;
    if (n.rfind("blk.4.", 0) == 0) continue;  // the MTP block
    const std::string blk = n.substr(0, n.find('.', 4) + 1);
    const std::string what = n.substr(blk.size());
    OutTensor o{n, t.type, t.ne, std::string(reinterpret_cast<const char*>(t.data), t.bytes)};
    if (what == "ssm_a" || what == "ssm_dt.bias") {
      o.bytes = grouped(t, 0, 1);
    } else if (what == "ssm_conv1d.weight") {
      o.bytes = rows(t, 0, 2 * nk * dk) + grouped(t, 2 * nk * dk, dv);
    } else if (what == "ssm_out.weight") {
      // Columns: each head's dv are whole blocks of 32 in Q8_0.
      EXPECT_EQ(t.type, GgmlType::kQ8_0);
      const int64_t head = ggml_row_bytes(t.type, dv);
      o.bytes.clear();
      for (int64_t row = 0; row < t.ne[1]; ++row) {
        const std::string whole = rows(t, row, 1);
        for (int64_t j = 0; j < nv; ++j) o.bytes += whole.substr(tiled(j) * head, head);
      }
    } else if (what == "attn_qkv.weight" || what == "attn_gate.weight" ||
               what == "ssm_beta.weight" || what == "ssm_alpha.weight") {
      continue;  // written below, grouped and fused as the layout says
    }
    out.push_back(std::move(o));
    if (what != "ssm_out.weight") continue;
    const GgufTensorInfo& qkv = *by_name[blk + "attn_qkv.weight"];
    const GgufTensorInfo& z = *by_name[blk + "attn_gate.weight"];
    const GgufTensorInfo& b = *by_name[blk + "ssm_beta.weight"];
    const GgufTensorInfo& a = *by_name[blk + "ssm_alpha.weight"];
    EXPECT_EQ(b.type, a.type);
    const std::string v = grouped(qkv, 2 * nk * dk, dv), zg = grouped(z, 0, dv);
    const std::string bg = grouped(b, 0, 1), ag = grouped(a, 0, 1);
    const uint64_t qrb = row_bytes(qkv), brb = row_bytes(b);
    std::string ba;
    for (int64_t g = 0; g < nk; ++g) {
      ba += bg.substr(g * r * brb, r * brb) + ag.substr(g * r * brb, r * brb);
    }
    out.push_back({blk + "ssm_ba.weight", b.type, {b.ne[0], 2 * nv}, ba});
    if (!fused_qkvz) {
      out.push_back({blk + "attn_qkv.weight", qkv.type, qkv.ne, rows(qkv, 0, 2 * nk * dk) + v});
      out.push_back({blk + "attn_gate.weight", z.type, z.ne, zg});
      continue;
    }
    EXPECT_EQ(qkv.type, z.type);
    std::string in;
    for (int64_t g = 0; g < nk; ++g) {
      in += rows(qkv, g * dk, dk) + rows(qkv, nk * dk + g * dk, dk);
      in += v.substr(g * r * dv * qrb, r * dv * qrb) + zg.substr(g * r * dv * qrb, r * dv * qrb);
    }
    out.push_back({blk + "ssm_in.weight", qkv.type, {qkv.ne[0], 2 * nk * dk + 2 * nv * dv}, in});
  }
  write_gguf(path, meta, out);
  return path;
}

TEST(GgufQwen3Next, BothLayoutsMeetTheGolden) {
  const std::string dir = test::shared_dir() + "/fixtures/gguf/";
  auto src = GgufFile::open(dir + kFixture + ".gguf");
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  auto golden = read_json_file(dir + "golden/" + kFixture + ".golden.json");
  ASSERT_TRUE(golden.is_ok());
  const std::string tmp = test::temp_dir("qwen3next_gguf");
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "ssm_in" : "attn_qkv + attn_gate");
    const std::string path = write_as_qwen3next(*src, fused, tmp + "/q3n.gguf");
    if (HasFailure()) break;
    LoadOptions opt;
    opt.threads = 2;
    opt.gguf_activations = GgmlActivations::kF32;
    auto model = load_model(path, opt);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    DecoderModel& m = **model;
    EXPECT_EQ(m.config().arch, Arch::kQwen3Next);
    EXPECT_EQ(m.config().num_layers, 4);
    const int64_t vocab = m.config().vocab_size;
    double worst = 0;
    for (const Json& p : (*golden)["prompts"]) {
      const auto ids = p["input_ids"].get<std::vector<int32_t>>();
      const auto n = static_cast<int64_t>(ids.size());
      KvCache cache(m.config(), n);
      std::vector<float> logits(static_cast<size_t>(n * vocab)), lp(static_cast<size_t>(vocab));
      ASSERT_TRUE(m.forward(ids.data(), n, cache, true, logits.data()).is_ok());
      for (int64_t t = 0; t < n; ++t) {
        log_softmax(logits.data() + t * vocab, vocab, lp.data());
        const Json& top = p["top5_per_position"][static_cast<size_t>(t)];
        const auto ref_ids = top["ids"].get<std::vector<int32_t>>();
        const auto ref_lp = top["logprobs"].get<std::vector<double>>();
        for (size_t j = 0; j < ref_ids.size(); ++j) {
          worst = std::max(worst, std::fabs(lp[static_cast<size_t>(ref_ids[j])] - ref_lp[j]));
        }
      }
    }
    std::printf("qwen3next GGUF (%s): max |dlogprob| %.2e\n", fused ? "ssm_in" : "split", worst);
    EXPECT_LE(worst, 1e-3);
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace mx
