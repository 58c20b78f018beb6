// Regex to grammar IR: an ECMAScript-like subset over UTF-8 text. Literals (any UTF-8
// character), escapes (\d \w \s \D \W \S, \n \t \r \f \v \0, \xHH, \uHHHH, escaped
// punctuation), classes [a-z0-9_] and [^...], '.', groups ( ), (?: ), (?<name> ), '|',
// quantifiers ? * + {m} {m,} {m,n} (a trailing lazy '?' is accepted and means nothing to a
// recognizer), and ^ at the start and $ at the end (the whole text always matches). Errors
// name the position (a byte offset).
#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include "text/grammar_internal.h"

namespace mx::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code point ranges, inclusive

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxGroupDepth = 128;

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// [lo, hi] of one encoded length into runs whose every byte position is one range: split
// until, at each continuation level, lo and hi either share the prefix above it or span its
// full range.
void utf8_split(ExprBuilder& b, uint32_t lo, uint32_t hi, std::vector<int32_t>* out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      utf8_split(b, lo, lo | m, out);
      utf8_split(b, (lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      utf8_split(b, lo, (hi & ~m) - 1, out);
      utf8_split(b, hi & ~m, hi, out);
      return;
    }
  }
  const std::string a = utf8_encode(lo), z = utf8_encode(hi);
  std::vector<int32_t> bytes;
  for (size_t k = 0; k < a.size(); ++k) {
    bytes.push_back(b.range(static_cast<unsigned char>(a[k]), static_cast<unsigned char>(z[k])));
  }
  out->push_back(b.seq(std::move(bytes)));
}

void utf8_ranges(ExprBuilder& b, uint32_t lo, uint32_t hi, std::vector<int32_t>* out) {
  if (lo <= 0xD7FF && hi >= 0xE000) {
    utf8_ranges(b, lo, 0xD7FF, out);
    utf8_ranges(b, 0xE000, hi, out);
    return;
  }
  if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
  if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
  if (lo > hi) return;
  for (uint32_t top : {0x7Fu, 0x7FFu, 0xFFFFu, kMaxCodePoint}) {
    if (lo > top) continue;
    utf8_split(b, lo, std::min(hi, top), out);
    if (hi <= top) return;
    lo = top + 1;
  }
}

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges negate(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : normalize(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

// Removes what a JSON string would have to escape.
Ranges json_safe(const Ranges& r) {
  Ranges out;
  const Ranges bad = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  for (auto [lo, hi] : normalize(r)) {
    uint32_t cur = lo;
    for (auto [blo, bhi] : bad) {
      if (bhi < cur || blo > hi) continue;
      if (blo > cur) out.emplace_back(cur, blo - 1);
      cur = bhi + 1;
    }
    if (cur <= hi) out.emplace_back(cur, hi);
  }
  return out;
}

class RegexParser {
 public:
  RegexParser(ExprBuilder& b, std::string_view re, bool json) : b_(b), re_(re), json_(json) {}

  Result<int32_t> parse() {
    if (!re_.empty() && re_[0] == '^') ++pos_;
    MX_ASSIGN_OR_RETURN(const int32_t e, parse_alt(0));
    if (pos_ < re_.size()) return error("unbalanced ')'");
    MX_RETURN_IF_ERROR(b_.status());
    return e;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("regex: " + what + " at position " + std::to_string(pos_));
  }
  bool at_end() const { return pos_ >= re_.size(); }
  char peek() const { return re_[pos_]; }

  Result<int32_t> parse_alt(int depth) {
    if (depth > kMaxGroupDepth) return error("groups nested too deep");
    std::vector<int32_t> alts;
    while (true) {
      MX_ASSIGN_OR_RETURN(const int32_t e, parse_concat(depth));
      alts.push_back(e);
      if (at_end() || peek() != '|') break;
      ++pos_;
    }
    return b_.alt(std::move(alts));
  }

  Result<int32_t> parse_concat(int depth) {
    std::vector<int32_t> parts;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && pos_ + 1 == re_.size()) {
        ++pos_;
        break;
      }
      MX_ASSIGN_OR_RETURN(int32_t e, parse_atom(depth));
      MX_ASSIGN_OR_RETURN(e, parse_quantifiers(e));
      parts.push_back(e);
      MX_RETURN_IF_ERROR(b_.status());
    }
    return b_.seq(std::move(parts));
  }

  // {m}, {m,}, {m,n}: sets *min/*max and returns true; false (position kept) when the text is
  // not a count, so that '{' is then a literal as in ECMAScript.
  Result<bool> parse_count(int32_t* min, int32_t* max) {
    size_t p = pos_ + 1;
    auto number = [&](int64_t* v) {
      const size_t start = p;
      *v = 0;
      while (p < re_.size() && re_[p] >= '0' && re_[p] <= '9') {
        *v = std::min<int64_t>(*v * 10 + (re_[p] - '0'), int64_t{1} << 40);
        ++p;
      }
      return p > start;
    };
    int64_t lo = 0, hi = -1;
    if (!number(&lo)) return false;
    if (p < re_.size() && re_[p] == ',') {
      ++p;
      if (!number(&hi)) hi = -1;
    } else {
      hi = lo;
    }
    if (p >= re_.size() || re_[p] != '}') return false;
    if (lo > kMaxRepeat || hi > kMaxRepeat) {
      return error("repetition count over the limit " + std::to_string(kMaxRepeat));
    }
    if (hi >= 0 && hi < lo) return error("repetition {m,n} with n < m");
    pos_ = p + 1;
    *min = static_cast<int32_t>(lo);
    *max = static_cast<int32_t>(hi);
    return true;
  }

  Result<int32_t> parse_quantifiers(int32_t e) {
    while (!at_end()) {
      int32_t min = 0, max = 0;
      const char c = peek();
      if (c == '?' || c == '*' || c == '+') {
        min = c == '+' ? 1 : 0;
        max = c == '?' ? 1 : -1;
        ++pos_;
      } else if (c == '{') {
        MX_ASSIGN_OR_RETURN(const bool is_count, parse_count(&min, &max));
        if (!is_count) break;
      } else {
        break;
      }
      if (!at_end() && peek() == '?') ++pos_;  // lazy: the same language
      e = b_.repeat(e, min, max);
    }
    return e;
  }

  Result<int32_t> parse_atom(int depth) {
    const char c = peek();
    switch (c) {
      case '(':
        return parse_group(depth);
      case '[':
        return parse_class();
      case '.':
        ++pos_;
        return ranges_expr(negate({{'\n', '\n'}}));
      case '\\': {
        ++pos_;
        Ranges r;
        MX_RETURN_IF_ERROR(parse_escape(&r, false));
        return ranges_expr(r);
      }
      case '*':
      case '+':
      case '?':
        return error("quantifier without a target");
      case '^':
        return error("'^' only at the start is supported");
      case '$':
        return error("'$' only at the end is supported");
      default:
        break;
    }
    MX_ASSIGN_OR_RETURN(const uint32_t cp, read_utf8());
    return ranges_expr({{cp, cp}});
  }

  Result<int32_t> parse_group(int depth) {
    ++pos_;
    if (re_.substr(pos_, 2) == "?:") {
      pos_ += 2;
    } else if (re_.substr(pos_, 2) == "?<" && re_.substr(pos_, 3) != "?<=" &&
               re_.substr(pos_, 3) != "?<!") {
      const size_t close = re_.find('>', pos_);
      if (close == std::string_view::npos) return error("unterminated group name");
      pos_ = close + 1;
    } else if (!at_end() && peek() == '?') {
      return error("lookaround and other (? groups are not supported");
    }
    MX_ASSIGN_OR_RETURN(const int32_t e, parse_alt(depth + 1));
    if (at_end() || peek() != ')') return error("missing ')'");
    ++pos_;
    return e;
  }

  Result<int32_t> parse_class() {
    ++pos_;
    bool negated = false;
    if (!at_end() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges r;
    bool first = true;
    while (true) {
      if (at_end()) return error("missing ']'");
      if (peek() == ']' && !first) break;
      first = false;
      Ranges item;
      MX_RETURN_IF_ERROR(class_item(&item));
      if (item.size() == 1 && item[0].first == item[0].second && pos_ + 1 < re_.size() &&
          peek() == '-' && re_[pos_ + 1] != ']') {
        ++pos_;
        Ranges hi;
        MX_RETURN_IF_ERROR(class_item(&hi));
        if (hi.size() != 1 || hi[0].first != hi[0].second) return error("bad class range");
        if (hi[0].first < item[0].first) return error("class range out of order");
        item[0].second = hi[0].first;
      }
      r.insert(r.end(), item.begin(), item.end());
    }
    ++pos_;
    return ranges_expr(negated ? negate(r) : r);
  }

  Status class_item(Ranges* r) {
    if (peek() == '\\') {
      ++pos_;
      return parse_escape(r, true);
    }
    Result<uint32_t> cp = read_utf8();
    if (!cp.is_ok()) return cp.status();
    r->emplace_back(*cp, *cp);
    return Status::ok();
  }

  Result<uint32_t> hex_digits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i, ++pos_) {
      if (at_end() || !std::isxdigit(static_cast<unsigned char>(peek()))) {
        return Result<uint32_t>(error("bad hex escape"));
      }
      const char c = peek();
      v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After the backslash. Class shorthands give several ranges.
  Status parse_escape(Ranges* r, bool in_class) {
    if (at_end()) return error("trailing backslash");
    const char c = peek();
    ++pos_;
    const Ranges digit = {{'0', '9'}};
    const Ranges word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const Ranges space = {{'\t', '\r'}, {' ', ' '}};
    switch (c) {
      case 'd':
        *r = digit;
        return Status::ok();
      case 'D':
        *r = negate(digit);
        return Status::ok();
      case 'w':
        *r = word;
        return Status::ok();
      case 'W':
        *r = negate(word);
        return Status::ok();
      case 's':
        *r = space;
        return Status::ok();
      case 'S':
        *r = negate(space);
        return Status::ok();
      case 'n':
        *r = {{'\n', '\n'}};
        return Status::ok();
      case 't':
        *r = {{'\t', '\t'}};
        return Status::ok();
      case 'r':
        *r = {{'\r', '\r'}};
        return Status::ok();
      case 'f':
        *r = {{'\f', '\f'}};
        return Status::ok();
      case 'v':
        *r = {{'\v', '\v'}};
        return Status::ok();
      case '0':
        *r = {{0, 0}};
        return Status::ok();
      case 'x':
      case 'u': {
        Result<uint32_t> v = hex_digits(c == 'x' ? 2 : 4);
        if (!v.is_ok()) return v.status();
        *r = {{*v, *v}};
        return Status::ok();
      }
      case 'b':
        if (in_class) {
          *r = {{'\b', '\b'}};
          return Status::ok();
        }
        --pos_;
        return error("word boundaries are not supported");
      default:
        break;
    }
    if (std::isalnum(static_cast<unsigned char>(c))) {
      --pos_;
      return error(std::string("unsupported escape '\\") + c + "'");
    }
    --pos_;
    Result<uint32_t> cp = read_utf8();
    if (!cp.is_ok()) return cp.status();
    *r = {{*cp, *cp}};
    return Status::ok();
  }

  Result<uint32_t> read_utf8() {
    const auto b0 = static_cast<unsigned char>(re_[pos_]);
    const int n = b0 < 0x80                 ? 1
                  : b0 >= 0xC2 && b0 < 0xE0 ? 2
                  : b0 >= 0xE0 && b0 < 0xF0 ? 3
                  : b0 >= 0xF0 && b0 < 0xF5 ? 4
                                            : 0;
    if (n == 0 || pos_ + n > re_.size()) return Result<uint32_t>(error("invalid UTF-8"));
    uint32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const auto bi = static_cast<unsigned char>(re_[pos_ + i]);
      if ((bi & 0xC0) != 0x80) return Result<uint32_t>(error("invalid UTF-8"));
      cp = (cp << 6) | (bi & 0x3F);
    }
    if (utf8_length(cp) != n || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return Result<uint32_t>(error("invalid UTF-8"));
    }
    pos_ += n;
    return cp;
  }

  // In a JSON string a lone character that needs escaping is written escaped; a set of
  // characters loses those members instead.
  Result<int32_t> ranges_expr(const Ranges& raw) {
    if (json_ && raw.size() == 1 && raw[0].first == raw[0].second && raw[0].first < 0x80) {
      const auto c = static_cast<char>(raw[0].first);
      if (c == '"' || c == '\\') return b_.literal(std::string("\\") + c);
      if (raw[0].first < 0x20) {
        static const char* kHex = "0123456789abcdef";
        return b_.literal(std::string("\\u00") + kHex[raw[0].first >> 4] + kHex[raw[0].first & 15]);
      }
    }
    const Ranges r = normalize(json_ ? json_safe(raw) : raw);
    if (r.empty()) return error("a class that matches nothing");
    std::vector<int32_t> alts;
    for (auto [lo, hi] : r) utf8_ranges(b_, lo, hi, &alts);
    return b_.alt(std::move(alts));
  }

  ExprBuilder& b_;
  std::string_view re_;
  bool json_;
  size_t pos_ = 0;
};

}  // namespace

int32_t utf8_range_expr(ExprBuilder& b, uint32_t lo, uint32_t hi) {
  std::vector<int32_t> alts;
  utf8_ranges(b, lo, hi, &alts);
  return b.alt(std::move(alts));
}

Result<int32_t> regex_expr(ExprBuilder& b, std::string_view regex, bool json_safe) {
  return RegexParser(b, regex, json_safe).parse();
}

}  // namespace mx::grammar
