#include <cstdio>
#include <map>

#include "app/commands.h"
#include "loader/model_inventory.h"
#include "parallel/dispatch.h"

namespace mx::app {
namespace {

std::string layer_kinds(const ModelConfig& c) {
  // Runs of equal kinds: "0 dense, 1-3 moe".
  std::string out;
  int64_t start = 0;
  for (int64_t i = 1; i <= c.num_layers; ++i) {
    if (i < c.num_layers && c.is_moe_layer(i) == c.is_moe_layer(start)) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(start);
    if (i - 1 > start) out += "-" + std::to_string(i - 1);
    out += c.is_moe_layer(start) ? " moe" : " dense";
    start = i;
  }
  return out;
}

// --ep-size N: what each rank would load (its contiguous experts; the rest replicated).
void print_ep_placement(const ModelInventory& inv, int ranks) {
  const int64_t experts = inv.config.num_experts;
  const uint64_t replicated = inv.total_bytes - inv.routed_expert_bytes;
  std::printf("expert parallelism: %d ranks, contiguous expert ranges, %llu bytes replicated\n",
              ranks, static_cast<unsigned long long>(replicated));
  for (int r = 0; r < ranks; ++r) {
    const ExpertRange e = expert_range(experts, r, ranks);
    const uint64_t mine = experts > 0 ? inv.routed_expert_bytes * static_cast<uint64_t>(e.count) /
                                            static_cast<uint64_t>(experts)
                                      : 0;
    std::printf("  rank %d: experts %lld-%lld of %lld, %llu bytes (%llu of experts)\n", r,
                static_cast<long long>(e.first), static_cast<long long>(e.first + e.count - 1),
                static_cast<long long>(experts), static_cast<unsigned long long>(replicated + mine),
                static_cast<unsigned long long>(mine));
  }
}

// --tp-size N: what each rank would hold (its share of every split tensor; the rest whole).
void print_tp_placement(const ModelInventory& inv, int ranks) {
  const uint64_t replicated = inv.total_bytes - inv.tp_split_bytes;
  std::printf("tensor parallelism: %d ranks, %llu bytes replicated, %llu bytes split\n", ranks,
              static_cast<unsigned long long>(replicated),
              static_cast<unsigned long long>(inv.tp_split_bytes));
  for (int r = 0; r < ranks; ++r) {
    const uint64_t mine = inv.tp_split_bytes * static_cast<uint64_t>(r + 1) / ranks -
                          inv.tp_split_bytes * static_cast<uint64_t>(r) / ranks;
    std::printf("  rank %d: about %llu bytes (%llu of split tensors)\n", r,
                static_cast<unsigned long long>(replicated + mine),
                static_cast<unsigned long long>(mine));
  }
}

int run_inspect(const std::string& dir, int ep_size, int tp_size) {
  auto inv = inspect_model_dir(dir);
  if (!inv.is_ok()) {
    std::fprintf(stderr, "mxserve inspect: %s\n", inv.status().to_string().c_str());
    return 1;
  }
  if (ep_size > 1) {
    if (inv->config.num_experts < ep_size) {
      std::fprintf(stderr, "mxserve inspect: %lld experts cannot be split over %d ranks\n",
                   static_cast<long long>(inv->config.num_experts), ep_size);
      return 1;
    }
    print_ep_placement(*inv, ep_size);
  }
  if (tp_size > 1) print_tp_placement(*inv, tp_size);
  const ModelConfig& c = inv->config;
  int64_t moe_layers = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) moe_layers += c.is_moe_layer(i) ? 1 : 0;
  std::printf("model:        %s\n", dir.c_str());
  std::printf("architecture: %s (%s)\n", c.hf_class.c_str(), c.model_type.c_str());
  std::printf("layers:       %lld (%lld dense, %lld moe): %s\n",
              static_cast<long long>(c.num_layers),
              static_cast<long long>(c.num_layers - moe_layers), static_cast<long long>(moe_layers),
              layer_kinds(c).c_str());
  std::printf("hidden:       %lld, vocab %lld, context %lld\n",
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size),
              static_cast<long long>(c.max_position_embeddings));
  std::printf("attention:    %lld q / %lld kv heads of %lld, rope theta %g\n",
              static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
              static_cast<long long>(c.head_dim), c.rope_theta);
  std::printf("mlp:          dense width %lld\n", static_cast<long long>(c.intermediate_size));
  if (c.num_experts > 0) {
    std::printf(
        "moe:          %lld experts, top-%lld, width %lld, norm_topk_prob %s\n",
        static_cast<long long>(c.num_experts), static_cast<long long>(c.num_experts_per_tok),
        static_cast<long long>(c.moe_intermediate_size), c.norm_topk_prob ? "true" : "false");
  }
  std::printf("tensors:      %zu in %zu file(s)\n", inv->num_tensors, inv->num_files);
  std::printf("parameters:   %lld\n", static_cast<long long>(inv->parameters));
  for (const auto& [dtype, bytes] : inv->bytes_by_dtype) {
    std::printf("bytes %-7s %llu\n", (dtype + ":").c_str(), static_cast<unsigned long long>(bytes));
  }
  if (inv->gguf) {
    const auto& g = *inv->gguf;
    std::printf("gguf:         version %u, general.file_type %lld, quantization_version %lld\n",
                g.version, static_cast<long long>(g.file_type),
                static_cast<long long>(g.quantization_version));
    for (const auto& [name, cb] : g.types) {
      std::printf("  %-8s %4lld tensors %12llu bytes\n", name.c_str(),
                  static_cast<long long>(cb.first), static_cast<unsigned long long>(cb.second));
    }
    std::printf("tokenizer:    %s\n", g.tokenizer.c_str());
    std::printf(
        "quantization: ggml blocks kept as stored (--gguf-dequant bf16 to expand, or "
        "--quantization to move into an MX scheme)\n");
    return 0;
  }
  if (!inv->quant) {
    std::printf("quantization: none (online: pass --quantization to quantize at load)\n");
    return 0;
  }
  const QuantDescription& q = *inv->quant;
  std::printf(
      "quantization: offline (quant_model_description.json), model_quant_type %s, "
      "group_size %lld, version %s\n",
      q.model_quant_type.c_str(), static_cast<long long>(q.group_size), q.version.c_str());
  std::printf("scale bytes:  %llu\n", static_cast<unsigned long long>(inv->scale_bytes));
  std::map<std::string, int> counts;
  for (const auto& [module, type] : inv->module_types) {
    std::string name(quant_type_name(type));
    if (type == QuantType::kUnsupported) name += "(" + q.raw_types.at(module + ".weight") + ")";
    ++counts[name];
  }
  for (const auto& [name, n] : counts) std::printf("  %-22s %d modules\n", name.c_str(), n);
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Describe a model directory without loading weights");
  auto dir = std::make_shared<std::string>(default_model_dir());
  cmd->add_option("-m,--model", *dir, "Model directory (HF or msmodelslim layout)")
      ->capture_default_str();
  auto ep = std::make_shared<int>(1);
  cmd->add_option("--ep-size", *ep, "Also print what each of N expert-parallel ranks loads")
      ->check(CLI::Range(1, 4096));
  auto tp = std::make_shared<int>(1);
  cmd->add_option("--tp-size", *tp, "Also print what each of N tensor-parallel ranks holds")
      ->check(CLI::Range(1, 4096));
  cmd->callback([dir, ep, tp, &exit_code] { exit_code = run_inspect(*dir, *ep, *tp); });
}

}  // namespace mx::app
