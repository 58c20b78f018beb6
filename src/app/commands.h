// Subcommands of the mxserve binary. Each registers its flags on the parent and returns the
// callback's exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace mx::app {

// The bundled model: models/tiny-qwen3-moe under the working directory, else under the
// source tree this binary was built from.
std::string default_model_dir();

void register_inspect(CLI::App& app, int& exit_code);

}  // namespace mx::app
