// Sampling parameters the generation tests share.
#pragma once

#include "runtime/sampler.h"

namespace mx::test {

// Greedy decoding of `n` tokens, end-of-sequence tokens ignored.
inline SamplingParams greedy(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

}  // namespace mx::test
