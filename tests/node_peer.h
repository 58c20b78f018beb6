// Runs a peer of tests/peers under node: the cases go in as a JSON file, the peer's answers
// come back as JSON. The expected values of the tests that use it come from these peers.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/mapped_file.h"
#include "test_util.h"

namespace mx::test {

// `script` under tests/peers, given `cases`; its output, or an empty array when it failed.
inline nlohmann::ordered_json run_node_peer(const std::string& script,
                                            const nlohmann::ordered_json& cases) {
  const std::string dir = temp_dir("peer");
  std::ofstream(dir + "/cases.json") << cases.dump();
  const std::string cmd = "node " + source_dir() + "/tests/peers/" + script + " " + dir +
                          "/cases.json " + dir + "/out.json";
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (std::system(cmd.c_str()) == 0) {
    auto text = read_text_file(dir + "/out.json");
    if (text.is_ok()) out = nlohmann::ordered_json::parse(*text, nullptr, false);
    if (out.is_discarded()) out = nlohmann::ordered_json::array();
  }
  std::filesystem::remove_all(dir);
  return out;
}

}  // namespace mx::test
