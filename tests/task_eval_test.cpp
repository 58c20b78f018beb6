// Few-shot task rows, prompts and answer extraction: the one-line arithmetic format and the
// gsm8k format (worked answers ending "#### N", scored by the last number generated, as
// SGLang's benchmark/gsm8k scores them). Every expectation is written out by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/evaluate.h"
#include "test_util.h"

namespace mx {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = test::temp_dir("task_eval") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TaskAnswer, LabelIsTheNumberAfterTheMarkWithoutCommas) {
  EXPECT_EQ(gsm8k_label("#### 1,234"), "1234");
  EXPECT_EQ(gsm8k_label("He has 3 + 4 = <<3+4=7>>7 cards.\nThen 7 * 2 = 14.\n#### 14"), "14");
  EXPECT_EQ(gsm8k_label("A drop of 11 from 4 gives -7.\n#### -7"), "-7");
  EXPECT_EQ(gsm8k_label("3 * 2.50 = 7.50\n#### 7.50"), "7.5");
  // No mark: the last number of the whole answer, as get_answer_value reads it.
  EXPECT_EQ(gsm8k_label("so the answer is 42"), "42");
  EXPECT_EQ(gsm8k_label("costs 12 dollars\n#### twelve"), "");
}

TEST(TaskAnswer, PredictionIsTheLastNumber) {
  EXPECT_EQ(last_number("She buys 3 bags of 12 apples, so 3 * 12 = 36 apples. 36 - 9 = 27"), "27");
  EXPECT_EQ(last_number("It is 4 - 11 = -7 degrees."), "-7");
  EXPECT_EQ(last_number("(-15)"), "-15");
  EXPECT_EQ(last_number("-3"), "-3");
  // A minus between digits or after a letter is a dash, not a sign.
  EXPECT_EQ(last_number("pages 10-12"), "12");
  EXPECT_EQ(last_number("item x-5"), "5");
  EXPECT_EQ(last_number("He spends $8.75."), "8.75");
  EXPECT_EQ(last_number("The total is $1,250.00 in all"), "1250");
  EXPECT_EQ(last_number("about 1,000,000 people"), "1000000");
  EXPECT_EQ(last_number("#### 007"), "7");
  EXPECT_EQ(last_number("0.50 liters"), "0.5");
  EXPECT_EQ(last_number("-0 degrees"), "0");
  EXPECT_EQ(last_number("18."), "18");
  EXPECT_EQ(last_number("no digits at all"), "");
  EXPECT_EQ(last_number(""), "");
}

TEST(TaskAnswer, Gsm8kPredictionStopsAtSglangStopStrings) {
  const TaskFormat g = TaskFormat::kGsm8k;
  EXPECT_EQ(task_stop_strings(g),
            (std::vector<std::string>{"Question", "Assistant:", "<|separator|>"}));
  EXPECT_EQ(task_prediction(" 3 * 12 = 36 pencils.\n36 - 9 = 27 pencils.\n#### 27", g), "27");
  EXPECT_EQ(task_prediction(" 5 + 5 = 10\n#### 10\n\nQuestion: Tom has 99 cats", g), "10");
  EXPECT_EQ(task_prediction(" 6\nAssistant: 7", g), "6");
  EXPECT_EQ(task_prediction(" 8<|separator|>9", g), "8");
  const std::string none = task_prediction(" I do not know.\nQuestion: 5", g);
  EXPECT_EQ(none, "");
  EXPECT_FALSE(is_number(none));  // scored invalid
  EXPECT_TRUE(is_number(task_prediction("the answer: -2.5", g)));
}

TEST(TaskAnswer, LineFormatKeepsItsRules) {
  EXPECT_EQ(task_stop_strings(TaskFormat::kLine), (std::vector<std::string>{"\n", "Question"}));
  EXPECT_EQ(task_prediction(" 405\nQuestion: What"), "405");
  EXPECT_EQ(task_prediction(" 12 Question"), "12");
  EXPECT_EQ(task_prediction(" 1,234\n"), "1,234");
  EXPECT_FALSE(is_number("1,234"));
  EXPECT_TRUE(is_number("-12.5"));
  EXPECT_FALSE(is_number("12."));
}

TEST(TaskAnswer, BudgetsAndFormatNames) {
  EXPECT_EQ(task_max_new_tokens(TaskFormat::kLine, 0), 8);
  EXPECT_EQ(task_max_new_tokens(TaskFormat::kGsm8k, 0), 512);
  EXPECT_EQ(task_max_new_tokens(TaskFormat::kGsm8k, 64), 64);
  EXPECT_EQ(*parse_task_format("gsm8k"), TaskFormat::kGsm8k);
  EXPECT_EQ(*parse_task_format("line"), TaskFormat::kLine);
  EXPECT_EQ(*parse_task_format("auto"), TaskFormat::kAuto);
  auto bad = parse_task_format("mmlu");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().to_string().find("'mmlu'"), std::string::npos);
}

const char* kGsmRows =
    R"({"question": "Ann has 2 pens and buys 3. How many pens?", "answer": "2 + 3 = 5\n#### 5"})"
    "\n"
    R"({"question": "Bo has 10 cards and gives 4 away. How many are left?", "answer": "10 - 4 = 6\n#### 6"})"
    "\n\n"
    R"({"question": "A box holds 1,000 nails. How many in 2 boxes?", "answer": "2 * 1,000 = 2,000\n#### 2,000"})"
    "\n";

TEST(TaskLoad, Gsm8kPromptsAreBuiltAsSglangBuildsThem) {
  const std::string path = write_file("gsm.jsonl", kGsmRows);
  TaskOptions opt;
  opt.shots = 1;
  auto items = load_task(path, opt);
  ASSERT_TRUE(items.is_ok()) << items.status().to_string();
  ASSERT_EQ(items->size(), 2u);  // the example row is not scored
  const std::string example =
      "Question: Ann has 2 pens and buys 3. How many pens?\nAnswer: 2 + 3 = 5\n#### 5\n\n";
  EXPECT_EQ((*items)[0].prompt,
            example + "Question: Bo has 10 cards and gives 4 away. How many are left?\nAnswer:");
  EXPECT_EQ((*items)[0].answer, "6");
  EXPECT_EQ((*items)[0].format, TaskFormat::kGsm8k);
  EXPECT_EQ((*items)[1].prompt,
            example + "Question: A box holds 1,000 nails. How many in 2 boxes?\nAnswer:");
  EXPECT_EQ((*items)[1].answer, "2000");

  opt.shots = 0;
  items = load_task(path, opt);
  ASSERT_TRUE(items.is_ok());
  ASSERT_EQ(items->size(), 3u);
  EXPECT_EQ((*items)[0].prompt, "Question: Ann has 2 pens and buys 3. How many pens?\nAnswer:");
}

TEST(TaskLoad, ShotsFileAndDefaultShots) {
  const std::string task = write_file("task.jsonl", kGsmRows);
  const std::string shots = write_file("shots.jsonl", R"({"question": "Q1?", "answer": "#### 1"})"
                                                      "\n"
                                                      R"({"question": "Q2?", "answer": "#### 2"})"
                                                      "\n");
  TaskOptions opt;
  opt.shots = 2;
  opt.shots_file = shots;
  opt.max_questions = 2;
  auto items = load_task(task, opt);
  ASSERT_TRUE(items.is_ok()) << items.status().to_string();
  ASSERT_EQ(items->size(), 2u);  // every task row is scored, up to the limit
  EXPECT_EQ((*items)[0].prompt,
            "Question: Q1?\nAnswer: #### 1\n\nQuestion: Q2?\nAnswer: #### 2\n\n"
            "Question: Ann has 2 pens and buys 3. How many pens?\nAnswer:");
  EXPECT_EQ((*items)[1].answer, "6");

  opt.shots = 3;
  auto short_file = load_task(task, opt);
  ASSERT_FALSE(short_file.is_ok());
  EXPECT_NE(short_file.status().to_string().find("shots.jsonl: 2 rows, fewer than the 3 shots"),
            std::string::npos);

  // No --shots and no prompt in the rows: SGLang's 5 examples, leaving 6 - 5 questions.
  std::string six;
  for (int i = 1; i <= 6; ++i) {
    six += R"({"question": "Q)" + std::to_string(i) + R"(?", "answer": "#### )" +
           std::to_string(i) + "\"}\n";
  }
  const std::string six_path = write_file("six.jsonl", six);
  items = load_task(six_path, TaskOptions{});
  ASSERT_TRUE(items.is_ok()) << items.status().to_string();
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].answer, "6");
  EXPECT_EQ((*items)[0].prompt,
            "Question: Q1?\nAnswer: #### 1\n\nQuestion: Q2?\nAnswer: #### 2\n\n"
            "Question: Q3?\nAnswer: #### 3\n\nQuestion: Q4?\nAnswer: #### 4\n\n"
            "Question: Q5?\nAnswer: #### 5\n\nQuestion: Q6?\nAnswer:");
}

TEST(TaskLoad, LineRowsAndAutoDetection) {
  const std::string path = write_file(
      "mixed.jsonl",
      R"({"question": "Question: What is 1 plus 2? Answer:", "answer": "3", "prompt": "P1"})"
      "\n"
      R"({"question": "Question: What is 2 plus 2? Answer:", "answer": 4, "prompt": "P2"})"
      "\n"
      R"({"question": "Three and four?", "answer": "3 + 4 = 7\n#### 7", "prompt": "P3"})"
      "\n");
  auto items = load_task(path, TaskOptions{});
  ASSERT_TRUE(items.is_ok()) << items.status().to_string();
  ASSERT_EQ(items->size(), 3u);
  EXPECT_EQ((*items)[0].prompt, "P1");
  EXPECT_EQ((*items)[0].answer, "3");
  EXPECT_EQ((*items)[0].format, TaskFormat::kLine);
  EXPECT_EQ((*items)[1].answer, "4");
  EXPECT_EQ((*items)[2].answer, "7");
  EXPECT_EQ((*items)[2].format, TaskFormat::kGsm8k);

  TaskOptions opt;
  opt.shots = 1;
  items = load_task(path, opt);
  ASSERT_TRUE(items.is_ok());
  EXPECT_EQ((*items)[0].prompt,
            "Question: What is 1 plus 2? Answer: 3\nQuestion: What is 2 plus 2? Answer:");

  // Forced gsm8k: a bare number is its own label.
  opt.shots = -1;
  opt.format = TaskFormat::kGsm8k;
  items = load_task(path, opt);
  ASSERT_TRUE(items.is_ok());
  EXPECT_EQ((*items)[1].format, TaskFormat::kGsm8k);
  EXPECT_EQ((*items)[1].answer, "4");
}

TEST(TaskLoad, BadRowsAreNamed) {
  const std::string no_number =
      write_file("nonum.jsonl", R"({"question": "Q?", "answer": "it is many\n#### many"})"
                                "\n");
  TaskOptions opt;
  opt.shots = 0;
  auto r = load_task(no_number, opt);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("nonum.jsonl:1: the answer has no number after '####'"),
            std::string::npos);

  const std::string no_prompt = write_file("noprompt.jsonl", R"({"question": "Q?", "answer": "3"})"
                                                             "\n");
  r = load_task(no_prompt, TaskOptions{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("noprompt.jsonl:1: needs string 'prompt' and 'answer'"),
            std::string::npos);

  r = load_task(no_prompt + ".absent", TaskOptions{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("cannot open"), std::string::npos);
}

// The bundled gsm8k-style set: every label as worked out by hand.
TEST(TaskLoad, BundledGsm8kStyleSet) {
  TaskOptions opt;
  opt.shots = 0;
  auto items = load_task(test::source_dir() + "/tests/data/gsm8k_style.jsonl", opt);
  ASSERT_TRUE(items.is_ok()) << items.status().to_string();
  const std::vector<std::string> want = {"27", "170",  "330", "125",  "672",  "750",  "6",  "-7",
                                         "30", "8.75", "30",  "41",   "200",  "8700", "22", "2",
                                         "60", "16",   "25",  "1800", "2705", "6"};
  ASSERT_EQ(items->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*items)[i].answer, want[i]) << "row " << i + 1;
    EXPECT_EQ((*items)[i].format, TaskFormat::kGsm8k);
  }
}

TEST(TaskReport, SglangLinesAndKeys) {
  TaskResult r;
  r.questions = 4;
  r.correct = 1;
  r.invalid = 2;
  r.output_tokens = 100;
  r.latency = 2.0;
  EXPECT_EQ(task_report(r),
            "Accuracy: 0.250\nInvalid: 0.500\nLatency: 2.000 s\nOutput throughput: 50.000 "
            "token/s\n");
  const Json j = task_report_json(r, "gsm8k_style", "local", 1);
  EXPECT_EQ(j["task"], "gsm8k_style");
  EXPECT_EQ(j["backend"], "local");
  EXPECT_EQ(j["num_gpus"], 0);
  EXPECT_EQ(j["latency"], 2.0);
  EXPECT_EQ(j["accuracy"], 0.25);
  EXPECT_EQ(j["num_requests"], 4);
  EXPECT_EQ(j["other"]["num_questions"], 4);
  EXPECT_EQ(j["other"]["parallel"], 1);
  EXPECT_EQ(j["output_throughput"], 50.0);
  EXPECT_EQ(j["invalid"], 2);
  EXPECT_EQ(j["invalid_rate"], 0.5);
  EXPECT_EQ(j["correct"], 1);
  EXPECT_EQ(task_name("/data/sets/gsm8k_test.jsonl"), "gsm8k_test");
}

TEST(TaskReport, DumpHasOneRowPerQuestion) {
  std::vector<TaskItem> items = {{"p1", "27", TaskFormat::kGsm8k}, {"p2", "5", TaskFormat::kLine}};
  TaskResult r;
  r.outputs = {" so 3 * 9 = 27\n#### 27", " 6\n"};
  const std::string path = test::temp_dir("task_eval") + "/dump.jsonl";
  ASSERT_TRUE(write_task_dump(path, items, r).is_ok());
  std::ifstream in(path);
  std::string a, b, c;
  std::getline(in, a);
  std::getline(in, b);
  EXPECT_FALSE(std::getline(in, c));
  EXPECT_EQ(Json::parse(a), Json::parse(R"({"index": 0, "label": "27", "prediction": "27",
                                            "output": " so 3 * 9 = 27\n#### 27"})"));
  EXPECT_EQ(Json::parse(b), Json::parse(R"({"index": 1, "label": "5", "prediction": "6",
                                            "output": " 6\n"})"));
}

}  // namespace
}  // namespace mx
