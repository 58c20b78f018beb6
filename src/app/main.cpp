#include <malloc.h>

#include <CLI/CLI.hpp>

#include "app/commands.h"
#include "core/log.h"

int main(int argc, char** argv) {
  // A forward pass allocates activation buffers of tens of MB (a prefill's routed rows, its
  // gate/up outputs) and frees them at its end. Above glibc's mmap threshold each would be
  // mapped fresh and page-faulted in again on every forward (~8% of a 512-token prefill of a
  // 30B-shaped MoE); served from the heap and kept there, they are reused.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"mxserve: MX-quantized LLM inference and serving"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mxserve 0.1.0");
  std::string level = "info";
  app.add_option("--log-level", level, "debug|info|warn|error|off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}));
  app.parse_complete_callback([&level] {
    mx::LogLevel l;
    if (mx::parse_log_level(level, &l)) mx::set_log_level(l);
  });
  int exit_code = 0;
  mx::app::register_run(app, exit_code);
  mx::app::register_chat(app, exit_code);
  mx::app::register_eval(app, exit_code);
  mx::app::register_quantize(app, exit_code);
  mx::app::register_serve(app, exit_code);
  mx::app::register_bench_serving(app, exit_code);
  mx::app::register_synth(app, exit_code);
  mx::app::register_bench(app, exit_code);
  mx::app::register_eval_server(app, exit_code);
  mx::app::register_inspect(app, exit_code);
  mx::app::register_tokenize(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return mx::app::ep_finish(exit_code);
}
