// The events of engine requests gathered per request key: tokens, log-probs, text and how each
// ended. A request's first tokens can arrive before submit() has returned its id to the
// submitting thread, hence keys chosen by the test.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace mx::test {

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, std::vector<float>> logprobs;
  std::map<uint64_t, std::string> text, reason;
  int finished = 0;
  std::function<void(const StreamEvent&)> sink(uint64_t key) {
    return [this, key](const StreamEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      auto& t = tokens[key];
      t.insert(t.end(), e.tokens.begin(), e.tokens.end());
      for (const TokenLogprob& lp : e.logprobs) logprobs[key].push_back(lp.logprob);
      text[key] += e.text;
      if (e.finished) {
        reason[key] = e.finish_reason;
        ++finished;
        cv.notify_all();
      }
    };
  }
  bool wait_for(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::minutes(5), [&] { return finished >= n; });
  }
};

}  // namespace mx::test
