// Shared by the tests of `quantize`'s msmodelslim export: the exported checkpoint states the
// expected type of named tensors, and loaded with no flag it gives online quantization's
// logits bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/json_util.h"
#include "model/export.h"
#include "model/model.h"

namespace mx::test {

inline std::vector<float> logits_of(DecoderModel& m, const std::vector<int32_t>& ids) {
  KvCache cache(m.config(), static_cast<int64_t>(ids.size()) + 1);
  std::vector<float> out(ids.size() * static_cast<size_t>(m.config().vocab_size));
  EXPECT_TRUE(
      m.forward(ids.data(), static_cast<int64_t>(ids.size()), cache, true, out.data()).is_ok());
  return out;
}

// Exports `src` in `scheme` to `out` (removed afterwards); `types` pairs a tensor name with the
// type string its description must give it.
inline void expect_offline_equals_online(
    const std::string& src, const std::string& out, Scheme scheme,
    const std::vector<std::pair<std::string, std::string>>& types) {
  ExportOptions eo;
  eo.scheme = scheme;
  auto sum = export_msmodelslim(src, out, eo);
  ASSERT_TRUE(sum.is_ok()) << sum.status().to_string();
  auto desc = read_text_file(out + "/quant_model_description.json");
  ASSERT_TRUE(desc.is_ok());
  for (const auto& [name, type] : types) {
    EXPECT_NE(desc->find("\"" + name + "\": \"" + type + "\""), std::string::npos) << name;
  }
  LoadOptions opt;
  opt.threads = 2;
  auto off = load_model(out, opt);
  ASSERT_TRUE(off.is_ok()) << off.status().to_string();
  opt.quantization = scheme;
  auto on = load_model(src, opt);
  ASSERT_TRUE(on.is_ok()) << on.status().to_string();
  const std::vector<int32_t> ids = {1277, 278, 258, 1105, 4017, 603, 3652, 1176, 11, 330};
  const auto a = logits_of(**off, ids), b = logits_of(**on, ids);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  std::filesystem::remove_all(out);
}

}  // namespace mx::test
