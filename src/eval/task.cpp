#include "eval/task.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string_view>

namespace mx {

double TaskResult::invalid_rate() const {
  return questions ? static_cast<double>(invalid) / static_cast<double>(questions) : 0;
}
double TaskResult::accuracy() const {
  return questions ? static_cast<double>(correct) / static_cast<double>(questions) : 0;
}
double TaskResult::ref_accuracy() const {
  return questions ? static_cast<double>(ref_correct) / static_cast<double>(questions) : 0;
}
double TaskResult::output_throughput() const {
  return latency > 0 ? static_cast<double>(output_tokens) / latency : 0;
}

namespace {
std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string normalize_number(bool negative, std::string_view whole, std::string_view frac) {
  while (whole.size() > 1 && whole.front() == '0') whole.remove_prefix(1);
  while (!frac.empty() && frac.back() == '0') frac.remove_suffix(1);
  std::string out(whole);
  if (!frac.empty()) out.append(".").append(frac);
  if (negative && out != "0") out.insert(0, 1, '-');
  return out;
}

// A non-blank line of a task file, parsed when it is used so that rows past --max-questions
// are never read as JSON.
struct TaskRow {
  std::string line;
  std::string where;  // file:line for messages
};

Result<std::vector<TaskRow>> read_task_rows(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open");
  std::vector<TaskRow> rows;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!strip(line).empty()) rows.push_back({line, path + ":" + std::to_string(line_no)});
  }
  return rows;
}

// The row as an object holding a string `key` and an "answer".
Result<Json> parse_row(const TaskRow& r, const char* key) {
  MX_ASSIGN_OR_RETURN(Json j, parse_json(r.line, r.where));
  if (!j.is_object() || !j.contains(key) || !j[key].is_string() || !j.contains("answer")) {
    return invalid_argument(r.where + ": needs string '" + key + "' and 'answer'");
  }
  return j;
}

std::string answer_text(const Json& row) {
  const Json& a = row["answer"];
  return a.is_string() ? a.get<std::string>() : a.dump();
}

TaskFormat row_format(const Json& row, TaskFormat requested) {
  if (requested != TaskFormat::kAuto) return requested;
  const Json& a = row["answer"];
  const bool worked =
      a.is_string() && a.get_ref<const std::string&>().find("####") != std::string::npos;
  return worked ? TaskFormat::kGsm8k : TaskFormat::kLine;
}

// The prompts' worked examples: the first `shots` rows of `rows`.
Result<std::string> task_examples(const std::vector<TaskRow>& rows, int64_t shots,
                                  TaskFormat requested) {
  std::string out;
  for (int64_t k = 0; k < shots && k < static_cast<int64_t>(rows.size()); ++k) {
    MX_ASSIGN_OR_RETURN(Json j, parse_row(rows[static_cast<size_t>(k)], "question"));
    const std::string q = j["question"].get<std::string>(), a = answer_text(j);
    if (row_format(j, requested) == TaskFormat::kGsm8k) {
      out += "Question: " + q + "\nAnswer: " + a + "\n\n";
    } else {
      out += q + " " + strip(a) + "\n";
    }
  }
  return out;
}

// --shots as given, or SGLang's default for a gsm8k file whose rows carry no prompt.
Result<int64_t> resolve_shots(const TaskOptions& opt, const TaskRow& first) {
  if (opt.shots >= 0) return opt.shots;
  MX_ASSIGN_OR_RETURN(Json j, parse_json(first.line, first.where));
  if (j.is_object() && !j.contains("prompt") && j.contains("answer") &&
      row_format(j, opt.format) == TaskFormat::kGsm8k) {
    return kGsm8kDefaultShots;
  }
  return opt.shots;
}

Result<TaskItem> task_item(const TaskRow& r, const std::string& examples, bool own_prompt,
                           TaskFormat requested) {
  MX_ASSIGN_OR_RETURN(Json j, parse_row(r, own_prompt ? "prompt" : "question"));
  TaskItem item;
  item.format = row_format(j, requested);
  const std::string text = j[own_prompt ? "prompt" : "question"].get<std::string>();
  if (item.format == TaskFormat::kGsm8k) {
    item.answer = gsm8k_label(answer_text(j));
    if (item.answer.empty()) {
      return invalid_argument(r.where + ": the answer has no number after '####'");
    }
    item.prompt = own_prompt ? text : examples + "Question: " + text + "\nAnswer:";
  } else {
    item.answer = strip(answer_text(j));
    item.prompt = own_prompt ? text : examples + text;
  }
  return item;
}
}  // namespace

Result<TaskFormat> parse_task_format(const std::string& name) {
  for (TaskFormat f : {TaskFormat::kAuto, TaskFormat::kLine, TaskFormat::kGsm8k}) {
    if (name == task_format_name(f)) return f;
  }
  return invalid_argument("task format '" + name + "' is not one of auto, line, gsm8k");
}

const char* task_format_name(TaskFormat f) {
  switch (f) {
    case TaskFormat::kLine:
      return "line";
    case TaskFormat::kGsm8k:
      return "gsm8k";
    case TaskFormat::kAuto:
      break;
  }
  return "auto";
}

int64_t task_max_new_tokens(TaskFormat f, int64_t max_new_tokens) {
  if (max_new_tokens > 0) return max_new_tokens;
  return f == TaskFormat::kGsm8k ? 512 : 8;
}

const std::vector<std::string>& task_stop_strings(TaskFormat f) {
  static const std::vector<std::string> line = {"\n", "Question"};
  static const std::vector<std::string> gsm8k = {"Question", "Assistant:", "<|separator|>"};
  return f == TaskFormat::kGsm8k ? gsm8k : line;
}

std::string task_prediction(const std::string& generated, TaskFormat f) {
  size_t end = generated.size();
  for (const std::string& s : task_stop_strings(f)) end = std::min(end, generated.find(s));
  const std::string head = generated.substr(0, end);
  return f == TaskFormat::kGsm8k ? last_number(head) : strip(head);
}

bool is_number(const std::string& text) {
  std::string_view s(text);
  if (!s.empty() && s.front() == '-') s.remove_prefix(1);
  const size_t dot = s.find('.');
  auto digits = [](std::string_view v) {
    return !v.empty() && std::all_of(v.begin(), v.end(), is_digit);
  };
  return digits(s.substr(0, dot)) && (dot == std::string_view::npos || digits(s.substr(dot + 1)));
}

std::string last_number(const std::string& text) {
  std::string s;
  s.reserve(text.size());
  for (char c : text) {
    if (c != ',') s += c;
  }
  std::string last;
  for (size_t i = 0; i < s.size();) {
    if (!is_digit(s[i])) {
      ++i;
      continue;
    }
    const size_t b = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    const std::string_view whole(s.data() + b, i - b);
    std::string_view frac;
    if (i + 1 < s.size() && s[i] == '.' && is_digit(s[i + 1])) {
      const size_t f = ++i;
      while (i < s.size() && is_digit(s[i])) ++i;
      frac = std::string_view(s.data() + f, i - f);
    }
    // "4-11" is two numbers; "= -7" and "(-7)" are one.
    const bool negative =
        b > 0 && s[b - 1] == '-' && (b == 1 || !std::isalnum(static_cast<unsigned char>(s[b - 2])));
    last = normalize_number(negative, whole, frac);
  }
  return last;
}

std::string gsm8k_label(const std::string& answer) {
  const size_t mark = answer.rfind("####");
  return last_number(mark == std::string::npos ? answer : answer.substr(mark + 4));
}

Result<std::vector<TaskItem>> load_task(const std::string& jsonl_path, const TaskOptions& opt) {
  MX_ASSIGN_OR_RETURN(std::vector<TaskRow> rows, read_task_rows(jsonl_path));
  if (rows.empty()) return invalid_argument(jsonl_path + ": no questions to score");
  MX_ASSIGN_OR_RETURN(int64_t shots, resolve_shots(opt, rows.front()));
  std::string examples;
  size_t first = 0;  // the first scored row
  if (shots > 0 && !opt.shots_file.empty()) {
    MX_ASSIGN_OR_RETURN(std::vector<TaskRow> shot_rows, read_task_rows(opt.shots_file));
    if (static_cast<int64_t>(shot_rows.size()) < shots) {
      return invalid_argument(opt.shots_file + ": " + std::to_string(shot_rows.size()) +
                              " rows, fewer than the " + std::to_string(shots) + " shots asked");
    }
    MX_ASSIGN_OR_RETURN(examples, task_examples(shot_rows, shots, opt.format));
  } else if (shots > 0) {
    MX_ASSIGN_OR_RETURN(examples, task_examples(rows, shots, opt.format));
    first = std::min(rows.size(), static_cast<size_t>(shots));
  }
  std::vector<TaskItem> items;
  for (size_t i = first; i < rows.size(); ++i) {
    if (opt.max_questions > 0 && static_cast<int64_t>(items.size()) >= opt.max_questions) break;
    MX_ASSIGN_OR_RETURN(TaskItem item, task_item(rows[i], examples, shots < 0, opt.format));
    items.push_back(std::move(item));
  }
  if (items.empty()) return invalid_argument(jsonl_path + ": no questions to score");
  return items;
}

std::string task_report(const TaskResult& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "Accuracy: %.3f\nInvalid: %.3f\nLatency: %.3f s\nOutput throughput: %.3f token/s\n",
                r.accuracy(), r.invalid_rate(), r.latency, r.output_throughput());
  return buf;
}

Json task_report_json(const TaskResult& r, const std::string& task, const std::string& backend,
                      int64_t parallel) {
  return {{"task", task},
          {"backend", backend},
          {"num_gpus", 0},
          {"latency", r.latency},
          {"accuracy", r.accuracy()},
          {"num_requests", r.questions},
          {"other", {{"num_questions", r.questions}, {"parallel", parallel}}},
          {"output_throughput", r.output_throughput()},
          {"questions", r.questions},
          {"correct", r.correct},
          {"invalid", r.invalid},
          {"invalid_rate", r.invalid_rate()},
          {"latency_s", r.latency},
          {"output_tokens", r.output_tokens}};
}

Status write_task_dump(const std::string& path, const std::vector<TaskItem>& items,
                       const TaskResult& r) {
  std::ofstream out(path);
  if (!out) return io_error(path + ": cannot write");
  for (size_t i = 0; i < r.outputs.size() && i < items.size(); ++i) {
    const Json row = {{"index", i},
                      {"label", items[i].answer},
                      {"prediction", task_prediction(r.outputs[i], items[i].format)},
                      {"output", r.outputs[i]}};
    out << row.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  out.flush();
  if (!out) return io_error(path + ": write failed");
  return Status::ok();
}

std::string task_name(const std::string& jsonl_path) {
  return std::filesystem::path(jsonl_path).stem().string();
}

}  // namespace mx
