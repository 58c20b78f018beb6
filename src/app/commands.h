// Subcommands of the mxserve binary. Each registers its flags on the parent and reports its
// exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "parallel/comm.h"
#include "runtime/multimodal.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace mx {
class ChatTemplate;
class Tokenizer;
}  // namespace mx

namespace mx::app {

// The bundled model: models/tiny-qwen3-moe under the working directory, else under the
// source tree this binary was built from.
std::string default_model_dir();
int default_threads();
// The most threads -t may ask for: above any machine's cores, so that a typo (-t 1000000) is
// refused rather than spawning that many threads.
inline constexpr int kMaxThreads = 4096;

// Sampling flags shared by run and chat, named as llama.cpp and vLLM users expect.
void add_sampling_flags(CLI::App* cmd, SamplingParams* p);
// --speculative-algorithm and --speculative-num-draft-tokens, as SGLang spells them.
void add_speculative_flags(CLI::App* cmd, SpeculativeOptions* s);

// A progress bar on stderr when it is a terminal (null otherwise): "\rWHAT [###   ] 3/9 UNIT".
std::function<void(int64_t, int64_t)> terminal_progress(const char* what, const char* unit);

// Flags of every command that loads a model.
struct ModelArgs {
  std::string model = default_model_dir();
  int threads = default_threads();
  std::string quantization;  // empty: as stored
  std::string scale_rule = "floor";
  bool quantize_lm_head = false;
  std::string rotation = "none";  // --rotation
  std::string kv_cache_dtype = "auto";
  std::string gguf_dequant = "none";
  std::string gguf_activations = "native";
  int ep_size = 1;
  int tp_size = 1;
  bool dp_attention = false;  // --enable-dp-attention
  bool dp_lm_head = false;    // --enable-dp-lm-head
  std::string ep_dispatch = "auto";
  int64_t ep_max_dispatch_tokens = 128;
};
void add_model_flags(CLI::App* cmd, ModelArgs* a);

// Loads a model with a progress bar on a terminal; prints the error and returns null on
// failure. With --ep-size N (under mpirun) this rank loads its share of the experts, unless
// `expert_parallel` is false (a reference model rank 0 runs alone).
std::unique_ptr<DecoderModel> load_model_or_report(const ModelArgs& a, const char* command,
                                                   bool expert_parallel = true);
// The token ids that end a generation from the checkpoint at `model`
// (checkpoint_stop_token_ids), the end of turn of `tmpl` included when given, so that every
// command stops where the others do; prints the error and returns nullopt on failure.
std::optional<std::vector<int32_t>> stop_token_ids_or_report(const std::string& model,
                                                             const Tokenizer& tok,
                                                             const ChatTemplate* tmpl,
                                                             const char* command);
// The drafter --speculative-algorithm needs a model for (mtp: the checkpoint's MTP head, which
// shares the target's embedding and lm_head; draft: --speculative-draft-model-path, which must
// share the target's tokenizer); both null for the others, which generate() makes itself.
// Prints the error and returns nullopt on failure.
struct SpecDrafter {
  std::unique_ptr<DecoderModel> head;
  std::unique_ptr<Drafter> drafter;
};
// Images for a prompt (run --image): the checkpoint's vision tower over each file, placed at
// the image placeholders of `ids`, or before the prompt when it names none. Prints the error
// and returns null on failure. With `tower`, the tower loaded there is used (and loaded there
// the first time), so that a conversation loads it once.
std::unique_ptr<MultimodalPrompt> multimodal_or_report(
    const ModelArgs& a, DecoderModel& model, std::vector<int32_t> ids,
    const std::vector<std::string>& files, const char* command,
    std::unique_ptr<VisionTower>* tower = nullptr);
// The checkpoint's vision tower loaded as the model flags ask (its linears in the model's
// scheme); null when the checkpoint has none or serves under expert parallelism. Prints the
// error and sets `failed` when a tower is there but does not load.
std::unique_ptr<VisionTower> vision_tower_or_report(const ModelArgs& a, DecoderModel& model,
                                                    const char* command, bool* failed);
std::optional<SpecDrafter> drafter_or_report(const ModelArgs& a, DecoderModel& model,
                                             const SpeculativeOptions& spec, const char* command);
// Expert parallelism, after the model loaded: on ranks 1.. replays rank 0's steps until rank 0
// ends the job and returns true (the command is done, *exit_code says how it ended); on rank 0
// (or one process) arranges for every step to reach the other ranks and returns false.
bool ep_worker_takes_over(DecoderModel& model, int* exit_code);
// Rank 0 ends the workers (or, after an error, the whole job); every rank finalizes MPI.
int ep_finish(int exit_code);
// Whether this process is rank 0 of an expert-parallel job, and the job's communicator.
Comm* ep_comm();

void register_inspect(CLI::App& app, int& exit_code);
void register_run(CLI::App& app, int& exit_code);
void register_tokenize(CLI::App& app, int& exit_code);
void register_chat(CLI::App& app, int& exit_code);
void register_eval(CLI::App& app, int& exit_code);
void register_quantize(CLI::App& app, int& exit_code);
void register_serve(CLI::App& app, int& exit_code);
void register_bench_serving(CLI::App& app, int& exit_code);
void register_synth(CLI::App& app, int& exit_code);
void register_bench(CLI::App& app, int& exit_code);
void register_eval_server(CLI::App& app, int& exit_code);

}  // namespace mx::app
