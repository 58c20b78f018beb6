// JSON numbers for the schema front end: integer and decimal ranges as digit automata.
//
// A range is split the way one compares decimal text by hand: integer parts first (all
// lengths between the bounds' lengths, then digit by digit within one length), then the
// fraction digit by digit. Each split has at most three branches and only one of them
// recurses, so a bound of n digits costs O(n) nodes: ±2^53 takes a few hundred.
//
// Every number has a bounded digit count, as xgrammar and llguidance bound theirs, so that a
// model cannot loop on zeros: kMaxIntDigits before the point, kMaxFracDigits after it, and an
// exponent (allowed only when there is no bound to keep) of kMaxExpDigits.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "text/grammar_internal.h"

namespace mx::grammar {
namespace {

int32_t digits(ExprBuilder& b, int32_t min, int32_t max) {
  return b.repeat(b.range('0', '9'), min, max);
}

bool all_of(const std::string& s, char c) { return s.find_first_not_of(c) == std::string::npos; }

// Decimal text of the integers in [lo, hi] of one digit count.
int32_t same_length_range(ExprBuilder& b, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return b.empty();
  const int32_t n = static_cast<int32_t>(lo.size());
  if (all_of(lo, '0') && all_of(hi, '9')) return digits(b, n, n);
  if (lo[0] == hi[0]) {
    return b.seq({b.literal(lo.substr(0, 1)), same_length_range(b, lo.substr(1), hi.substr(1))});
  }
  const size_t rest = lo.size() - 1;
  std::vector<int32_t> alts;
  alts.push_back(b.seq(
      {b.literal(lo.substr(0, 1)), same_length_range(b, lo.substr(1), std::string(rest, '9'))}));
  if (lo[0] + 1 <= hi[0] - 1) {
    alts.push_back(b.seq({b.range(lo[0] + 1, hi[0] - 1), digits(b, n - 1, n - 1)}));
  }
  alts.push_back(b.seq(
      {b.literal(hi.substr(0, 1)), same_length_range(b, std::string(rest, '0'), hi.substr(1))}));
  return b.alt(std::move(alts));
}

// Canonical digit strings (no leading zero but "0" itself), compared as numbers.
int compare_int(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

std::string increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  return "1" + s;
}

// s > 0.
std::string decrement(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  if (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

// The integers in [lo, hi] (digit strings, hi empty: up to kMaxIntDigits digits); -1 if none.
int32_t int_range(ExprBuilder& b, const std::string& lo, const std::string& hi) {
  const std::string top = hi.empty() ? std::string(kMaxIntDigits, '9') : hi;
  if (compare_int(lo, top) > 0) return -1;
  if (lo.size() == top.size()) return same_length_range(b, lo, top);
  std::vector<int32_t> alts;
  alts.push_back(same_length_range(b, lo, std::string(lo.size(), '9')));
  const int32_t from = static_cast<int32_t>(lo.size()) + 1;
  const int32_t to = static_cast<int32_t>(top.size()) - 1;
  if (from <= to) alts.push_back(b.seq({b.range('1', '9'), digits(b, from - 1, to - 1)}));
  alts.push_back(same_length_range(b, "1" + std::string(top.size() - 1, '0'), top));
  return b.alt(std::move(alts));
}

// A non-negative decimal: integer digits and fraction digits without trailing zeros.
struct Decimal {
  std::string whole = "0";
  std::string frac;
};

int compare(const Decimal& a, const Decimal& b) {
  if (const int c = compare_int(a.whole, b.whole); c != 0) return c;
  return a.frac.compare(b.frac) < 0 ? -1 : (a.frac == b.frac ? 0 : 1);
}

// |v| as decimal text: the shortest digits that read back as v, with the exponent spelled out.
Decimal decimal_of(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  const std::string s(buf, r.ptr);
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  mant.erase(std::remove(mant.begin(), mant.end(), '.'), mant.end());
  const int exp = std::stoi(s.substr(e + 1));
  Decimal d;
  if (exp >= 0) {
    if (static_cast<int>(mant.size()) <= exp + 1) mant.append(exp + 1 - mant.size(), '0');
    d.whole = mant.substr(0, exp + 1);
    d.frac = mant.substr(exp + 1);
  } else {
    d.frac = std::string(-exp - 1, '0') + mant;
  }
  while (!d.frac.empty() && d.frac.back() == '0') d.frac.pop_back();
  if (d.whole.size() > 1 && d.whole[0] == '0') d.whole.erase(0, d.whole.find_first_not_of('0'));
  return d;
}

// Fraction digit strings t (possibly empty), read as the value 0.t: whether "" belongs, and
// the non-empty ones (-1: none).
struct Frac {
  bool empty = false;
  int32_t some = -1;
};

int32_t as_expr(ExprBuilder& b, const Frac& f) {
  std::vector<int32_t> alts;
  if (f.empty) alts.push_back(b.empty());
  if (f.some >= 0) alts.push_back(f.some);
  return alts.empty() ? -1 : b.alt(std::move(alts));
}

int32_t frac_digits(ExprBuilder& b) { return digits(b, 0, kMaxFracDigits); }

Frac frac_any(ExprBuilder& b) { return {true, digits(b, 1, kMaxFracDigits)}; }
Frac frac_zero(ExprBuilder& b) { return {true, b.repeat(b.literal("0"), 1, kMaxFracDigits)}; }
Frac frac_nonzero(ExprBuilder& b) {
  return {false, b.seq({b.repeat(b.literal("0"), 0, kMaxFracDigits - 1), b.range('1', '9'),
                        frac_digits(b)})};
}

// Branches that start with one digit d and go on with `rest` (skipped when rest is none).
void push_digit(ExprBuilder& b, std::vector<int32_t>& alts, char d, int32_t rest) {
  if (rest >= 0) alts.push_back(b.seq({b.literal(std::string(1, d)), rest}));
}

int32_t alt_or_none(ExprBuilder& b, std::vector<int32_t> alts) {
  return alts.empty() ? -1 : b.alt(std::move(alts));
}

// 0.t >= 0.p (> when strict).
Frac frac_ge(ExprBuilder& b, const std::string& p, bool strict) {
  if (p.empty()) return strict ? frac_nonzero(b) : frac_any(b);
  std::vector<int32_t> alts;
  if (p[0] < '9') alts.push_back(b.seq({b.range(p[0] + 1, '9'), frac_digits(b)}));
  push_digit(b, alts, p[0], as_expr(b, frac_ge(b, p.substr(1), strict)));
  return {false, alt_or_none(b, std::move(alts))};
}

// 0.t <= 0.p (< when strict).
Frac frac_le(ExprBuilder& b, const std::string& p, bool strict) {
  if (p.empty()) return strict ? Frac{} : frac_zero(b);
  std::vector<int32_t> alts;
  if (p[0] > '0') alts.push_back(b.seq({b.range('0', p[0] - 1), frac_digits(b)}));
  push_digit(b, alts, p[0], as_expr(b, frac_le(b, p.substr(1), strict)));
  return {true, alt_or_none(b, std::move(alts))};
}

// 0.lo <= 0.t <= 0.hi (each end strict as asked); 0.lo <= 0.hi.
Frac frac_between(ExprBuilder& b, const std::string& lo, const std::string& hi, bool lo_strict,
                  bool hi_strict) {
  if (lo.empty() && !lo_strict) return frac_le(b, hi, hi_strict);
  if (hi.empty()) return Frac{};  // lo is 0 too, and an end is strict
  const char l0 = lo.empty() ? '0' : lo[0];
  const std::string l_rest = lo.empty() ? "" : lo.substr(1);
  std::vector<int32_t> alts;
  if (l0 == hi[0]) {
    push_digit(b, alts, l0,
               as_expr(b, frac_between(b, l_rest, hi.substr(1), lo_strict, hi_strict)));
  } else {
    push_digit(b, alts, l0, as_expr(b, frac_ge(b, l_rest, lo_strict)));
    if (l0 + 1 <= hi[0] - 1) alts.push_back(b.seq({b.range(l0 + 1, hi[0] - 1), frac_digits(b)}));
    push_digit(b, alts, hi[0], as_expr(b, frac_le(b, hi.substr(1), hi_strict)));
  }
  return {false, alt_or_none(b, std::move(alts))};
}

// The text after the integer digits: nothing, or a point and the digits of `f` (never for
// an integer).
int32_t fraction_text(ExprBuilder& b, const Frac& f, bool integer) {
  if (integer) return f.empty ? b.empty() : -1;
  std::vector<int32_t> alts;
  if (f.empty) alts.push_back(b.empty());
  if (f.some >= 0) alts.push_back(b.seq({b.literal("."), f.some}));
  return alt_or_none(b, std::move(alts));
}

void push_whole(ExprBuilder& b, std::vector<int32_t>& alts, int32_t whole, int32_t frac) {
  if (whole >= 0 && frac >= 0) alts.push_back(b.seq({whole, frac}));
}

// Magnitudes in [lo, hi] (hi absent: unbounded), without a sign; -1 if none.
int32_t magnitude_range(ExprBuilder& b, const Decimal& lo, bool lo_strict,
                        const std::optional<Decimal>& hi, bool hi_strict, bool integer) {
  if (hi) {
    const int c = compare(lo, *hi);
    if (c > 0 || (c == 0 && (lo_strict || hi_strict))) return -1;
  }
  std::vector<int32_t> alts;
  if (hi && lo.whole == hi->whole) {
    push_whole(b, alts, b.literal(lo.whole),
               fraction_text(b, frac_between(b, lo.frac, hi->frac, lo_strict, hi_strict), integer));
    return alt_or_none(b, std::move(alts));
  }
  if (static_cast<int32_t>(lo.whole.size()) > kMaxIntDigits) return -1;
  push_whole(b, alts, b.literal(lo.whole),
             fraction_text(b, frac_ge(b, lo.frac, lo_strict), integer));
  const std::string next = increment(lo.whole);
  if (!hi || compare_int(next, hi->whole) < 0) {
    push_whole(b, alts, int_range(b, next, hi ? decrement(hi->whole) : ""),
               fraction_text(b, frac_any(b), integer));
  }
  if (hi) {
    push_whole(b, alts, b.literal(hi->whole),
               fraction_text(b, frac_le(b, hi->frac, hi_strict), integer));
  }
  return alt_or_none(b, std::move(alts));
}

// An exponent-free number in the bounds: the non-negative side and the negative side apart,
// so that "-0" (equal to 0, and rejected by no validator, but never what a model means) and
// the sign of each bound need no special case.
int32_t bounded_number(ExprBuilder& b, const NumberBounds& r, bool integer) {
  const Decimal zero;
  std::vector<int32_t> alts;
  const bool hi_nonneg = !r.hi || *r.hi > 0 || (*r.hi == 0 && !r.hi_strict);
  if (hi_nonneg) {
    const bool lo_pos = r.lo && *r.lo >= 0;
    std::optional<Decimal> hi;
    if (r.hi) hi = decimal_of(*r.hi);
    const int32_t m = magnitude_range(b, lo_pos ? decimal_of(*r.lo) : zero, lo_pos && r.lo_strict,
                                      hi, r.hi_strict, integer);
    if (m >= 0) alts.push_back(m);
  }
  if (!r.lo || *r.lo < 0) {
    const bool hi_neg = r.hi && *r.hi < 0;
    std::optional<Decimal> top;
    if (r.lo) top = decimal_of(*r.lo);
    const int32_t m = magnitude_range(b, hi_neg ? decimal_of(*r.hi) : zero,
                                      hi_neg ? r.hi_strict : true, top, r.lo_strict, integer);
    if (m >= 0) alts.push_back(b.seq({b.literal("-"), m}));
  }
  return alt_or_none(b, std::move(alts));
}

}  // namespace

std::pair<int64_t, int64_t> char_length_range(const ExprBuilder& b, int32_t e) {
  constexpr int64_t kCap = int64_t{1} << 40;  // past any real bound; keeps sums from overflowing
  const Expr& x = b.expr(e);
  auto clamp = [&](int64_t v) { return v < 0 || v > kCap ? int64_t{-1} : v; };
  switch (x.kind) {
    case Expr::Kind::kBytes: {
      bool lead = false;
      for (int c = 0; c < 256 && !lead; ++c) lead = x.bytes.has(c) && (c < 0x80 || c >= 0xC0);
      return {lead ? 1 : 0, lead ? 1 : 0};
    }
    case Expr::Kind::kSeq: {
      int64_t lo = 0, hi = 0;
      for (const int32_t k : x.kids) {
        const auto [a, z] = char_length_range(b, k);
        lo = std::min(lo + a, kCap);
        hi = hi < 0 || z < 0 ? -1 : clamp(hi + z);
      }
      return {lo, hi};
    }
    case Expr::Kind::kAlt: {
      int64_t lo = kCap, hi = 0;
      for (const int32_t k : x.kids) {
        const auto [a, z] = char_length_range(b, k);
        lo = std::min(lo, a);
        hi = hi < 0 || z < 0 ? -1 : std::max(hi, z);
      }
      return {x.kids.empty() ? 0 : lo, hi};
    }
    case Expr::Kind::kRepeat: {
      const auto [a, z] = char_length_range(b, x.kids[0]);
      const int64_t hi = x.max < 0 && z != 0 ? -1 : (z < 0 ? -1 : clamp(z * std::max(x.max, 0)));
      return {std::min(a * x.min, kCap), hi};
    }
    default:
      return {0, -1};
  }
}

int32_t any_number_expr(ExprBuilder& b) {
  const int32_t whole =
      b.alt({b.literal("0"), b.seq({b.range('1', '9'), digits(b, 0, kMaxIntDigits - 1)})});
  ByteSet e, sign;
  e.add('e', 'e');
  e.add('E', 'E');
  sign.add('+', '+');
  sign.add('-', '-');
  const int32_t frac = b.opt(b.seq({b.literal("."), digits(b, 1, kMaxFracDigits)}));
  const int32_t exp = b.opt(b.seq({b.bytes(e), b.opt(b.bytes(sign)), digits(b, 1, kMaxExpDigits)}));
  return b.seq({b.opt(b.literal("-")), whole, frac, exp});
}

Result<int32_t> number_range_expr(ExprBuilder& b, const NumberBounds& r, bool integer,
                                  const std::string& path) {
  if (!integer && !r.lo && !r.hi) return any_number_expr(b);
  NumberBounds q = r;
  if (integer) {
    // The integers inside the bounds, as inclusive integer bounds.
    if (q.lo) q.lo = q.lo_strict ? std::floor(*q.lo) + 1 : std::ceil(*q.lo);
    if (q.hi) q.hi = q.hi_strict ? std::ceil(*q.hi) - 1 : std::floor(*q.hi);
    q.lo_strict = q.hi_strict = false;
  }
  const int32_t e = bounded_number(b, q, integer);
  if (e < 0) {
    return invalid_argument(path + ": no " + (integer ? "integer" : "number") +
                            " satisfies the bounds");
  }
  return e;
}

}  // namespace mx::grammar
