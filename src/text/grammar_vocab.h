// Private to the grammar engine: the vocabulary as the matcher walks it (a byte trie in
// pre-order with what the walk's shortcuts need per node), and the UTF-8 decoder over plain
// string characters that both use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/grammar_internal.h"

namespace mx {

namespace grammar {
inline bool is_plain(uint8_t b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }
constexpr int32_t kMaxTextHeight = 64;

// The well-formed UTF-8 decoder (RFC 3629: no overlongs, surrogates or code points past
// U+10FFFF), over plain characters: at a character boundary, or expecting continuation bytes
// (the range of the next one restricted after E0, ED, F0 and F4).
enum Utf8 : uint8_t {
  kBoundary,
  kCont1,
  kCont2,
  kContE0,
  kContED,
  kCont3,
  kContF0,
  kContF4,
  kUtf8States,
  kInvalid = kUtf8States
};

inline uint8_t utf8_next(uint8_t q, uint8_t b) {
  const bool cont = b >= 0x80 && b <= 0xBF;
  switch (q) {
    case kBoundary:
      if (b < 0x80) return is_plain(b) ? kBoundary : kInvalid;
      if (b >= 0xC2 && b <= 0xDF) return kCont1;
      if (b == 0xE0) return kContE0;
      if (b == 0xED) return kContED;
      if (b >= 0xE1 && b <= 0xEF) return kCont2;
      if (b == 0xF0) return kContF0;
      if (b == 0xF4) return kContF4;
      if (b >= 0xF1 && b <= 0xF3) return kCont3;
      return kInvalid;
    case kCont1:
      return cont ? kBoundary : kInvalid;
    case kCont2:
      return cont ? kCont1 : kInvalid;
    case kContE0:
      return b >= 0xA0 && b <= 0xBF ? kCont1 : kInvalid;
    case kContED:
      return b >= 0x80 && b <= 0x9F ? kCont1 : kInvalid;
    case kCont3:
      return cont ? kCont2 : kInvalid;
    case kContF0:
      return b >= 0x90 && b <= 0xBF ? kCont2 : kInvalid;
    case kContF4:
      return b >= 0x80 && b <= 0x8F ? kCont2 : kInvalid;
    default:
      return kInvalid;
  }
}

}  // namespace grammar

struct TokenVocab::Impl {
  enum Kind : uint8_t { kText, kStop, kNever };
  int32_t size = 0;
  uint64_t serial = 0;
  std::vector<std::string> bytes;
  std::vector<uint8_t> kind;
  std::vector<int32_t> stops;
  // The trie in pre-order, root left out: node i reads node_byte[i] at depth node_depth[i]
  // (1-based); its subtree is [i, node_end[i]); its tokens are toks[tok_begin[i]..
  // tok_begin[i + 1]), so a subtree's tokens are contiguous too.
  std::vector<uint8_t> node_byte;
  std::vector<int32_t> node_depth;
  std::vector<int32_t> node_end;
  std::vector<int32_t> tok_begin;
  std::vector<int32_t> toks;
  int32_t max_depth = 0;
  // Text below node i: the UTF-8 decoder state after its bytes (a Utf8 value), and the height
  // of its subtree when every path below it goes on as well-formed UTF-8 of plain characters
  // (no control character, quote or backslash), else -1. Inside a string such a subtree needs
  // no walk when its start state survives any such text that long.
  std::vector<uint8_t> utf8_state;
  std::vector<int16_t> text_height;
  // text_bits[L]: the tokens of at most L bytes (L <= kMaxTextHeight) that are plain text
  // from a character boundary (whole or ending inside a character): what a string-body
  // position that survives L bytes of any text accepts.
  std::vector<std::vector<uint32_t>> text_bits;
  // The bytes read anywhere strictly below node i (an index into `sets`, equal sets shared)
  // and the height of its subtree, for the walk's run test (WalkAutomaton::run_safe).
  std::vector<int32_t> below_set;
  std::vector<int16_t> height;
  std::vector<grammar::ByteSet> sets;
  // Node i and everything below it read plain ASCII only (is_plain bytes from the root down).
  std::vector<uint8_t> ascii_subtree;
};

}  // namespace mx
