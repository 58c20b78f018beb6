#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string_view>

#include "app/commands.h"
#include "loader/model_text.h"
#include "media/image.h"
#include "runtime/generate.h"
#include "server/reasoning_parser.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mx::app {
namespace {

struct ChatArgs {
  ModelArgs m;
  std::string system;
  bool no_think = false;
  bool hide_think = false;
  SamplingParams sampling;
  SpeculativeOptions spec;
};

// Prints a reply as it streams: its reasoning dimmed when stdout is a terminal (or left out),
// then a blank line and the content.
class ReplyPrinter {
 public:
  ReplyPrinter(bool dim, bool hide_reasoning) : dim_(dim), hide_(hide_reasoning) {}
  void print(const ReasoningSplit& s) {
    if (!s.reasoning.empty() && !hide_) {
      if (dim_ && !in_dim_) write("\x1b[2m");
      in_dim_ = dim_;
      write(s.reasoning);
      shown_reasoning_ = true;
    }
    if (!s.content.empty()) {
      end_dim();
      if (shown_reasoning_ && !in_content_) write("\n\n");
      in_content_ = true;
      write(s.content);
    }
    std::fflush(stdout);
  }
  void end_dim() {
    if (in_dim_) write("\x1b[0m");
    in_dim_ = false;
  }

 private:
  static void write(std::string_view s) { std::fwrite(s.data(), 1, s.size(), stdout); }
  bool dim_, hide_;
  bool in_dim_ = false, shown_reasoning_ = false, in_content_ = false;
};

// `/image FILE`: checked now (a model without a tower, a missing or unreadable file are said
// at once), sent with the next message.
void attach_image(const ChatArgs& a, const DecoderModel& model, const std::string& line,
                  std::vector<std::string>* pending) {
  const size_t at = line.find_first_not_of(' ', 6);
  if (line.size() > 6 && line[6] != ' ') {
    std::fprintf(stderr, "mxserve chat: unknown command %s (/image FILE)\n", line.c_str());
    return;
  }
  if (at == std::string::npos) {
    std::fprintf(stderr, "mxserve chat: /image needs a file: /image FILE\n");
    return;
  }
  if (!model.config().vision.present()) {
    std::fprintf(stderr, "mxserve chat: %s has no vision tower; images cannot be sent to it\n",
                 a.m.model.c_str());
    return;
  }
  const std::string file = line.substr(at);
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "mxserve chat: %s: cannot open the image\n", file.c_str());
    return;
  }
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
  if (auto img = decode_image(bytes.data(), bytes.size()); !img.is_ok()) {
    std::fprintf(stderr, "mxserve chat: %s: %s\n", file.c_str(), img.status().message().c_str());
    return;
  }
  pending->push_back(file);
  std::fprintf(stderr, "[image %s attached to the next message]\n", file.c_str());
}

// The images first, then the text, as the Qwen-VL processors' examples order a turn.
nlohmann::ordered_json user_content(const std::string& text,
                                    const std::vector<std::string>& images) {
  if (images.empty()) return text;
  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  for (size_t i = 0; i < images.size(); ++i) parts.push_back({{"type", "image"}});
  parts.push_back({{"type", "text"}, {"text", text}});
  return parts;
}

int chat(ChatArgs& a) {
  auto model = load_model_or_report(a.m, "chat");
  if (!model) return 1;
  if (int code = 0; ep_worker_takes_over(*model, &code)) return code;
  auto tok = load_model_tokenizer(a.m.model);
  auto tmpl = load_model_chat_template(a.m.model);
  if (!tok.is_ok() || !tmpl.is_ok()) {
    std::fprintf(stderr, "mxserve chat: %s\n",
                 (!tok.is_ok() ? tok.status() : tmpl.status()).to_string().c_str());
    return 1;
  }
  const auto stops = stop_token_ids_or_report(a.m.model, **tok, &*tmpl, "chat");
  if (!stops) return 1;
  auto drafter = drafter_or_report(a.m, *model, a.spec, "chat");
  if (!drafter) return 1;
  a.sampling.stop_token_ids.insert(a.sampling.stop_token_ids.end(), stops->begin(), stops->end());
  const bool tty = ::isatty(STDIN_FILENO) != 0;
  const bool out_tty = ::isatty(STDOUT_FILENO) != 0;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (a.no_think) extra["enable_thinking"] = false;
  if (tty)
    std::fprintf(stderr,
                 "Type a message; /image FILE attaches an image to the next one, /reset clears "
                 "the conversation, /exit or Ctrl-D quits.\n");
  std::string line;
  // Every image of the conversation in order (each turn renders the whole of it), those for
  // the next message, and the tower, loaded at the first image.
  std::vector<std::string> images, pending;
  std::unique_ptr<VisionTower> tower;
  for (;;) {
    if (tty) std::fputs("> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages = nlohmann::ordered_json::array();
      if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
      images.clear();
      pending.clear();
      continue;
    }
    if (line.rfind("/image", 0) == 0) {
      attach_image(a, *model, line, &pending);
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", user_content(line, pending)}});
    auto prompt = tmpl->apply(messages, true, extra);
    if (!prompt.is_ok()) {
      std::fprintf(stderr, "mxserve chat: %s\n", prompt.status().to_string().c_str());
      return 1;
    }
    std::vector<int32_t> ids = (*tok)->encode(*prompt);
    std::unique_ptr<MultimodalPrompt> mm;
    if (!pending.empty() || !images.empty()) {
      std::vector<std::string> all = images;
      all.insert(all.end(), pending.begin(), pending.end());
      mm = multimodal_or_report(a.m, *model, ids, all, "chat", &tower);
      if (!mm) {
        messages.erase(messages.end() - 1);
        pending.clear();
        continue;
      }
      images = std::move(all);
      pending.clear();
      ids = mm->ids;
    }
    ReasoningParser think(prompt_starts_in_reasoning(*prompt));
    ReplyPrinter printer(out_tty, a.hide_think);
    auto r = generate(*model, **tok, ids, a.sampling, model->config().max_position_embeddings,
                      [&](const std::string& s) { printer.print(think.push(s)); },
                      {.spec = a.spec, .drafter = drafter->drafter.get(), .multimodal = mm.get()});
    printer.print(think.finish());
    printer.end_dim();
    if (!r.is_ok()) {
      // The conversation outgrew the context: say so and start over.
      std::fprintf(stderr, "\nmxserve chat: %s; use /reset\n", r.status().to_string().c_str());
      messages.erase(messages.end() - 1);
      continue;
    }
    std::printf("\n");
    if (tty)
      std::fprintf(stderr, "[%zu tokens, %.1f tok/s]\n", r->token_ids.size(), r->decode_tok_s());
    messages.push_back({{"role", "assistant"}, {"content", r->text}});
  }
  return 0;
}

}  // namespace

void register_chat(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ChatArgs>();
  a->sampling.temperature = 0.7f;
  a->sampling.top_p = 0.9f;
  a->sampling.max_tokens = 256;
  auto* cmd = app.add_subcommand("chat", "Interactive chat with the model's chat template");
  add_model_flags(cmd, &a->m);
  cmd->add_option("--system", a->system, "System prompt");
  cmd->add_flag("--no-think", a->no_think, "Render with enable_thinking=false");
  cmd->add_flag("--hide-think", a->hide_think,
                "Leave the reasoning (<think>...</think>) out of the printed replies");
  add_sampling_flags(cmd, &a->sampling);
  add_speculative_flags(cmd, &a->spec);
  cmd->callback([a, &exit_code] { exit_code = chat(*a); });
}

}  // namespace mx::app
