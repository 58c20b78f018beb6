// libFuzzer target: quant_model_description.json (msmodelslim). Whatever parses keeps one type
// and one raw string per tensor.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "json_mutator.h"
#include "loader/quant_description.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mx::fuzz::guarded("quant_description", [&] {
    static const std::string kLabel = "fuzz/quant_model_description.json";
    auto d = mx::parse_quant_description(mx::fuzz::as_string(data, size), kLabel);
    if (!mx::fuzz::accepted("parse_quant_description", d, kLabel)) return;
    MX_FUZZ_CHECK(d->group_size > 0, "group_size");
    MX_FUZZ_CHECK(d->tensor_types.size() == d->raw_types.size(), "types and raw strings");
    for (const auto& [name, type] : d->tensor_types) {
      MX_FUZZ_CHECK(d->type_of(name) == type, name);
      MX_FUZZ_CHECK(d->raw_types.count(name) == 1, name);
      MX_FUZZ_CHECK(mx::quant_type_from_string(d->raw_types.at(name)) == type, name);
      (void)mx::quant_type_name(type);
    }
  });
  return 0;
}

MX_FUZZ_JSON_MUTATOR
