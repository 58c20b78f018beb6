#include <cstdio>

#include "app/commands.h"
#include "model/synth.h"

namespace mx::app {

void register_synth(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SynthOptions>();
  auto out = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "synth", "Write a BF16 checkpoint with random weights and a published model's shapes");
  o->like = "qwen3-30b-a3b";
  cmd->add_option("--like", o->like,
                  "qwen3-30b-a3b (MoE), qwen3-8b (dense) or qwen3.5-35b-a3b (hybrid MoE)")
      ->capture_default_str();
  cmd->add_option("--layers", o->layers, "Decoder layers")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Weights are a function of the seed")->capture_default_str();
  cmd->add_option("-o,--output", *out, "Output directory")->required();
  o->tokenizer_dir = default_model_dir();
  cmd->add_option("--tokenizer", o->tokenizer_dir,
                  "Directory whose tokenizer is padded to the model's vocabulary")
      ->capture_default_str();
  cmd->callback([o, out, &exit_code] {
    o->progress = terminal_progress("writing", "shards");
    auto r = write_synthetic_model(*o, *out);
    if (!r.is_ok()) {
      std::fprintf(stderr, "mxserve synth: %s\n", r.status().to_string().c_str());
      exit_code = 1;
      return;
    }
    std::printf("wrote %s: %s-shaped, %lld layers, %lld parameters, %.2f GB in %lld shards\n",
                out->c_str(), o->like.c_str(), static_cast<long long>(o->layers),
                static_cast<long long>(r->parameters), static_cast<double>(r->bytes) / 1e9,
                static_cast<long long>(r->shards));
  });
}

}  // namespace mx::app
