// Subcommands of the mxserve binary. Each registers its flags on the parent and reports its
// exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/sampler.h"

namespace mx::app {

// The bundled model: models/tiny-qwen3-moe under the working directory, else under the
// source tree this binary was built from.
std::string default_model_dir();
int default_threads();

// Sampling flags shared by run and chat, named as llama.cpp and vLLM users expect.
void add_sampling_flags(CLI::App* cmd, SamplingParams* p);

// Loads a model with a progress bar on a terminal; prints the error and returns null on failure.
std::unique_ptr<DecoderModel> load_model_or_report(const std::string& dir, int threads,
                                                   const char* command);

void register_inspect(CLI::App& app, int& exit_code);
void register_run(CLI::App& app, int& exit_code);
void register_tokenize(CLI::App& app, int& exit_code);
void register_chat(CLI::App& app, int& exit_code);

}  // namespace mx::app
