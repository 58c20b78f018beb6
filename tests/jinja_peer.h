// Renders templates with the peer, @huggingface/jinja (tests/peers/render.mjs under node), and
// compares mxserve's text with it: the expected text always comes from the peer.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "node_peer.h"
#include "text/chat_template.h"

namespace mx::test {

using TemplateCase = std::pair<std::string, nlohmann::ordered_json>;  // template, context

// The peer's output per case: {"text": ...} or {"error": ...}; an empty array on failure.
inline nlohmann::ordered_json peer_render(const std::vector<TemplateCase>& cases) {
  nlohmann::ordered_json in = nlohmann::ordered_json::array();
  for (const auto& [t, ctx] : cases) in.push_back({{"template", t}, {"context", ctx}});
  return run_node_peer("render.mjs", in);
}

struct PeerAgreement {
  int same = 0;    // cases rendered alike, errors included
  int errors = 0;  // cases that both renderers refused
};

// Renders every case with mxserve and with the peer and expects the same text, or an error
// from both. `label(i)` names case i in failures.
template <typename Label>
PeerAgreement expect_same_as_peer(const std::vector<TemplateCase>& cases, Label label) {
  const nlohmann::ordered_json out = peer_render(cases);
  EXPECT_EQ(out.size(), cases.size()) << "the peer failed to run (run scripts/install-deps.sh)";
  PeerAgreement r;
  if (out.size() != cases.size()) return r;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto tmpl = ChatTemplate::parse(cases[i].first);
    EXPECT_TRUE(tmpl.is_ok()) << label(i) << ": " << tmpl.status().to_string();
    if (!tmpl.is_ok()) continue;
    auto got = tmpl->render(cases[i].second);
    if (out[i].contains("error")) {
      EXPECT_FALSE(got.is_ok()) << label(i) << ": the peer failed (" << out[i]["error"]
                                << ") but mxserve rendered";
      if (!got.is_ok()) ++r.same, ++r.errors;
      continue;
    }
    EXPECT_TRUE(got.is_ok()) << label(i) << ": " << got.status().to_string();
    if (!got.is_ok()) continue;
    const std::string want = out[i]["text"].get<std::string>();
    EXPECT_EQ(*got, want) << label(i) << " context: " << cases[i].second.dump().substr(0, 400);
    if (*got == want) ++r.same;
  }
  return r;
}

}  // namespace mx::test
