// Images through the serving engine on tiny-qwen3_5-moe-vl: sixteen concurrent image requests
// give exactly the tokens each gives alone (the one-request generation loop, itself held to
// the fixture's goldens by vision_test), and the prefix cache never lets two different images
// with the same text share KV, while the same image with the same text is found again.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>

#include "core/json_util.h"
#include "engine_collector.h"
#include "greedy_params.h"
#include "media/image.h"
#include "media/vision_preprocess.h"
#include "model/vision_tower.h"
#include "runtime/engine.h"
#include "runtime/multimodal.h"
#include "test_util.h"

namespace mx {
namespace {

std::string vl_dir() { return test::shared_dir() + "/fixtures/tiny-qwen3_5-moe-vl"; }

using test::Collector;

struct Vl {
  std::unique_ptr<DecoderModel> model;
  std::shared_ptr<const Tokenizer> tok;
  std::unique_ptr<VisionTower> tower;
  VisionPreprocessConfig pre;
  Json golden;
};

Vl& vl() {
  static Vl* v = [] {
    auto* f = new Vl();
    LoadOptions opt;
    opt.threads = 2;
    auto m = load_model(vl_dir(), opt);
    MX_CHECK(m.is_ok());
    f->model = std::move(m).value();
    f->tok = *Tokenizer::load(vl_dir());
    auto t = load_vision_tower(vl_dir(), opt, &f->model->pool());
    MX_CHECK(t.is_ok());
    f->tower = std::move(t).value();
    f->pre = *read_preprocessor_config(vl_dir());
    f->golden = *read_json_file(vl_dir() + "/golden/golden.json");
    return f;
  }();
  return *v;
}

Image case_image(const Json& c) {
  std::ifstream in(vl_dir() + "/golden/" + c["image_file"].get<std::string>(), std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
  auto img = decode_image(bytes.data(), bytes.size());
  MX_CHECK(img.is_ok());
  return std::move(img).value();
}

// Same size, other pixels: 0 the image, 1 inverted, 2 channels rotated, 3 mirrored, 4 darker.
Image variant(Image img, int v) {
  const int w = img.width, h = img.height;
  std::vector<uint8_t> src = img.rgb;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int ch = 0; ch < 3; ++ch) {
        const size_t at = (static_cast<size_t>(y) * w + x) * 3;
        uint8_t& d = img.rgb[at + ch];
        if (v == 1) d = static_cast<uint8_t>(255 - src[at + ch]);
        if (v == 2) d = src[at + (ch + 1) % 3];
        if (v == 3) d = src[(static_cast<size_t>(y) * w + (w - 1 - x)) * 3 + ch];
        if (v == 4) d = static_cast<uint8_t>(src[at + ch] / 2);
      }
    }
  }
  return img;
}

std::shared_ptr<const MultimodalPrompt> prompt_for(const std::string& text, const Image& img) {
  Vl& f = vl();
  const std::vector<int32_t> ids = f.tok->encode(text);
  auto px = preprocess_image(img, f.pre);
  MX_CHECK(px.is_ok());
  const std::vector<PixelPatches> images{std::move(*px)};
  auto p = build_multimodal_prompt(*f.tower, ids, images);
  MX_CHECK(p.is_ok());
  return std::make_shared<const MultimodalPrompt>(std::move(*p));
}

using test::greedy;

GenerateResult alone_result(const MultimodalPrompt& mm, int n) {
  GenerateOptions opt;
  opt.multimodal = &mm;
  opt.logprobs = true;
  auto r = generate(*vl().model, *vl().tok, mm.ids, greedy(n), 1024, {}, opt);
  MX_CHECK(r.is_ok());
  return std::move(r).value();
}

std::vector<int32_t> alone(const MultimodalPrompt& mm, int n) {
  return alone_result(mm, n).token_ids;
}

TEST(VisionEngine, SixteenConcurrentImageRequestsEqualEachAlone) {
  Vl& f = vl();
  std::vector<std::shared_ptr<const MultimodalPrompt>> prompts;
  for (int i = 0; i < 16; ++i) {
    const Json& c = f.golden["cases"][static_cast<size_t>(i % 3)];
    prompts.push_back(prompt_for(c["rendered_prompt"], variant(case_image(c), i / 3)));
  }
  // The first of each case is its golden image: the alone path meets its golden greedy ids.
  for (size_t k = 0; k < 3; ++k) {
    const Json& c = f.golden["cases"][k];
    const auto want = c["greedy_16_ids"].get<std::vector<int32_t>>();
    const auto n = c["greedy_safe_len"].get<size_t>();
    const std::vector<int32_t> got = alone(*prompts[k], 16);
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + n),
              std::vector<int32_t>(want.begin(), want.begin() + n))
        << c["name"];
  }
  SchedulerConfig cfg;
  cfg.chunked_prefill_size = 64;  // a few prompts per step
  Collector col;
  {
    Engine engine(*f.model, *f.tok, cfg);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest req{prompts[i]->ids, greedy(12), col.sink(i)};
      req.multimodal = prompts[i];
      ASSERT_TRUE(engine.submit(std::move(req)).is_ok());
    }
    ASSERT_TRUE(col.wait_for(static_cast<int>(prompts.size())));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(col.tokens[i], alone(*prompts[i], 12)) << "request " << i;
  }
}

TEST(VisionEngine, DifferentImagesWithTheSameTextNeverSharePrefixBlocks) {
  Vl& f = vl();
  const Json& c = f.golden["cases"][1];
  // A hybrid model resumes a cached prefix from a saved recurrent state (at multiples of 64),
  // so the prompt runs past 128 tokens with the image early in it.
  std::string text = "<|im_start|>user\nLook:<|vision_start|><|image_pad|><|vision_end|>";
  for (int i = 0; i < 5; ++i) {
    text += "Describe the colors of every ring, from the outside in, and say which is widest. ";
  }
  text += "<|im_end|>\n<|im_start|>assistant\n";
  const Image img = case_image(c);
  const auto a = prompt_for(text, img);
  const auto b = prompt_for(text, variant(img, 1));
  ASSERT_EQ(a->ids, b->ids);  // the same tokens: only the pixels tell them apart
  ASSERT_GT(a->ids.size(), 140u);
  const int64_t image_start =
      std::find(a->ids.begin(), a->ids.end(), f.tower->config().image_token_id) - a->ids.begin();
  const int64_t image_end = image_start + a->image_tokens;
  SchedulerConfig cfg;
  Engine engine(*f.model, *f.tok, cfg);
  Collector col;
  int64_t hits_before = 0;
  auto run = [&](uint64_t key, const std::shared_ptr<const MultimodalPrompt>& mm) {
    hits_before = engine.stats().prefix_cache_hits;
    EngineRequest req{mm->ids, greedy(8), col.sink(key)};
    req.multimodal = mm;
    req.top_logprobs = 0;
    EXPECT_TRUE(engine.submit(std::move(req)).is_ok());
    EXPECT_TRUE(col.wait_for(static_cast<int>(key) + 1));
    return engine.stats().prefix_cache_hits - hits_before;
  };
  const int64_t first_image_block = image_start / cfg.block_size * cfg.block_size;
  run(0, a);
  // The other image: nothing past the whole blocks before its first image token is found.
  EXPECT_LE(run(1, b), first_image_block);
  // The same image again: found past the image.
  EXPECT_GT(run(2, a), image_end);
  // Each answer, log-probs included, is its own image's: B's equal B computed alone, and
  // differ from A's, which the repeated A equals bit for bit.
  const GenerateResult ra = alone_result(*a, 8), rb = alone_result(*b, 8);
  EXPECT_EQ(col.tokens[0], ra.token_ids);
  EXPECT_EQ(col.tokens[1], rb.token_ids);
  EXPECT_EQ(col.tokens[2], ra.token_ids);
  EXPECT_EQ(col.logprobs[0], ra.logprobs);
  EXPECT_EQ(col.logprobs[1], rb.logprobs);
  EXPECT_EQ(col.logprobs[2], ra.logprobs);
  EXPECT_NE(ra.logprobs, rb.logprobs);
}

}  // namespace
}  // namespace mx
