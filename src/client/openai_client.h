// A small client of an OpenAI-compatible server (mxserve, vLLM, SGLang): streamed completions
// with the arrival time of every chunk, which is what serving benchmarks measure.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace mx {

struct Endpoint {
  std::string base_url;  // http://host:port, with or without a trailing /v1
  std::string api_key;   // empty: no Authorization header
};

struct StreamedCompletion {
  bool ok = false;
  int status = 0;
  std::string error;  // why it failed: transport error or the server's error message
  std::string text;
  std::string finish_reason;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double ttft = 0;          // seconds from sending to the first chunk with text
  double latency = 0;       // seconds from sending to the end of the stream
  std::vector<double> itl;  // seconds between consecutive chunks with text
};

// POSTs `body` to /v1/completions as a stream (stream and include_usage are set here) and
// reads the server-sent events to the end.
StreamedCompletion stream_completion(const Endpoint& ep, nlohmann::json body);

// The id of the first model the server lists.
Result<std::string> first_model_id(const Endpoint& ep);

}  // namespace mx
