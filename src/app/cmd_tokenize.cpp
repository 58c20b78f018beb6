#include <cstdio>

#include "app/commands.h"
#include "core/json_util.h"
#include "loader/model_text.h"
#include "text/tokenizer.h"

namespace mx::app {
namespace {

struct TokenizeArgs {
  std::string model = default_model_dir();
  std::string tokenizer;
  std::string text;
  bool decode = false;
};

int tokenize(const TokenizeArgs& a) {
  auto tok = load_model_tokenizer(a.tokenizer.empty() ? a.model : a.tokenizer);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "mxserve tokenize: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  if (!a.decode) {
    std::printf("%s\n", Json((*tok)->encode(a.text)).dump().c_str());
    return 0;
  }
  auto ids = parse_json(a.text, "token ids");
  if (!ids.is_ok() || !ids->is_array()) {
    std::fprintf(stderr,
                 "mxserve tokenize --decode: expected a JSON array of ids, e.g. [9707, 11]\n");
    return 1;
  }
  std::vector<int32_t> v;
  for (const Json& e : *ids) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
        e.get<int64_t>() >= (*tok)->vocab_size()) {
      std::fprintf(stderr, "mxserve tokenize --decode: %s is not a token id of this vocabulary\n",
                   e.dump().c_str());
      return 1;
    }
    v.push_back(e.get<int32_t>());
  }
  std::printf("%s\n", (*tok)->decode(v).c_str());
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (or decode ids)");
  cmd->add_option("-m,--model", a->model, "Model directory holding tokenizer.json")
      ->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer, "A tokenizer.json, or a directory holding one");
  cmd->add_flag("--decode", a->decode, "TEXT is a JSON array of ids; print their text");
  cmd->add_option("text", a->text, "Text to tokenize")->required();
  cmd->callback([a, &exit_code] { exit_code = tokenize(*a); });
}

}  // namespace mx::app
