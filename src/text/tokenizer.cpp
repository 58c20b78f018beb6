#include "text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <filesystem>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/json_util.h"
#include "core/mapped_file.h"

namespace mx {

namespace {

// GPT-2's byte-to-unicode table: printable bytes map to themselves, the rest to U+0100 on.
std::vector<uint32_t> byte_to_codepoint() {
  std::vector<uint32_t> table(256, 0);
  std::vector<bool> direct(256, false);
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) table[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
  return table;
}

// Decodes one code point at s[i]; returns its length or 0 when invalid.
size_t utf8_decode(std::string_view s, size_t i, uint32_t* cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t len;
  uint32_t v, lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    v = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const auto d = static_cast<unsigned char>(s[i + k]);
    if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) return 0;
    v = (v << 6) | (d & 0x3F);
  }
  *cp = v;
  return len;
}

// Length of the maximal subpart of an ill-formed sequence at s[i] (at least 1).
size_t invalid_subpart(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t len = 0;
  uint32_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 1;
  size_t k = 1;
  for (; k < len && i + k < s.size(); ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) break;
  }
  return k;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    const size_t n = utf8_decode(s, i, &cp);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += invalid_subpart(s, i);
    }
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for the start of a sequence that the end cuts short.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if (c >= 0xC2 && c <= 0xDF)
      need = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      need = 3;
    else if (c >= 0xF0 && c <= 0xF4)
      need = 4;
    if (need > back && invalid_subpart(s, n - back) == back) return n - back;
    return n;
  }
  return n;
}

struct Tokenizer::Impl {
  std::vector<std::string> id_to_bytes;
  std::vector<uint8_t> special;
  std::unordered_map<std::string, int32_t> bytes_to_id;  // raw bytes of ordinary tokens
  std::unordered_map<std::string, int32_t> text_to_id;   // token text as written in the json
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // pair -> (rank, merged id)
  int32_t byte_id[256];
  std::vector<AddedToken> added;  // longest first
  pcre2_code* regex = nullptr;
  bool nfc = false;
  // Piece -> ids. Only short pieces are cached (HF keeps words up to 256 bytes in its cache
  // too): long ones are rare, cost little next to their own BPE, and would let one request
  // fill the cache. The byte budget bounds memory whatever the traffic.
  static constexpr size_t kCacheMaxPieceBytes = 256;
  static constexpr size_t kCacheMaxBytes = 64u << 20;
  static constexpr size_t kCacheEntryOverhead = 96;  // node, key and vector headers
  static constexpr size_t kMaxMergeBytes = size_t{1} << 30;
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
  mutable size_t cache_bytes = 0;

  ~Impl() {
    if (regex != nullptr) pcre2_code_free(regex);
  }

  void bpe(std::string_view piece, std::vector<int32_t>* out) const;
  void bpe_merge(std::string_view piece, std::vector<int32_t>* out) const;
  void encode_segment(std::string_view text, std::vector<int32_t>* out) const;
};

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>* out) const {
  const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (auto it = cache.find(std::string(piece)); it != cache.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out->size();
  // Symbol indices are 32-bit. No request comes near this (the body limit is megabytes), so
  // only a caller handing over a gigabyte-long word sees it split, at a UTF-8 boundary.
  while (piece.size() > kMaxMergeBytes) {
    size_t cut = kMaxMergeBytes;
    while (cut > 0 && (static_cast<unsigned char>(piece[cut]) & 0xC0) == 0x80) --cut;
    bpe_merge(piece.substr(0, cut), out);
    piece.remove_prefix(cut);
  }
  bpe_merge(piece, out);
  if (!cacheable) return;
  std::vector<int32_t> ids(out->begin() + static_cast<std::ptrdiff_t>(first), out->end());
  const size_t cost = piece.size() + ids.size() * sizeof(int32_t) + kCacheEntryOverhead;
  std::lock_guard<std::mutex> lock(cache_mu);
  if (cache_bytes + cost > kCacheMaxBytes) {
    cache.clear();
    cache_bytes = 0;
  }
  if (cache.emplace(std::string(piece), std::move(ids)).second) cache_bytes += cost;
}

// The adjacent pair of lowest rank merges first, the leftmost among equal ranks, until no pair
// has a merge: what HF's BPE does. Symbols form a linked list indexed by their first byte, so
// indices keep the left-to-right order, and a min-heap holds one candidate per adjacent pair,
// keyed (rank, left index) in one integer. A merge changes at most two neighbouring pairs;
// their old candidates stay in the heap and are skipped when popped, as a candidate only stands
// while its left symbol is alive and still merges with its right neighbour by the same rule
// (a rank names one rule). O(n log n) for a piece of n bytes where a rescan per merge was
// O(n^2): one long word in a request could hold a core for minutes.
void Tokenizer::Impl::bpe_merge(std::string_view piece, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id, prev, next;  // prev and next are -1 at the ends; prev is kDead once merged away
  };
  constexpr int32_t kDead = -2;
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> sym(piece.size());
  for (int32_t i = 0; i < n; ++i) {
    sym[static_cast<size_t>(i)] = {
        byte_id[static_cast<unsigned char>(piece[static_cast<size_t>(i)])], i - 1,
        i + 1 < n ? i + 1 : -1};
  }
  auto merge_of = [&](int32_t left) -> const std::pair<int32_t, int32_t>* {
    const Symbol& l = sym[static_cast<size_t>(left)];
    if (l.next < 0) return nullptr;
    auto it = merges.find(pair_key(l.id, sym[static_cast<size_t>(l.next)].id));
    return it == merges.end() ? nullptr : &it->second;
  };
  auto key = [](int32_t rank, int32_t pos) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(pos);
  };
  std::vector<uint64_t> initial;
  initial.reserve(piece.size());
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const auto* m = merge_of(i)) initial.push_back(key(m->first, i));
  }
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> heap(std::greater<>(),
                                                                            std::move(initial));
  auto push = [&](int32_t left) {
    if (const auto* m = merge_of(left)) heap.push(key(m->first, left));
  };
  while (!heap.empty()) {
    const auto rank = static_cast<int32_t>(heap.top() >> 32);
    const auto pos = static_cast<int32_t>(heap.top() & 0xFFFFFFFFu);
    heap.pop();
    Symbol& l = sym[static_cast<size_t>(pos)];
    if (l.prev == kDead) continue;
    const auto* m = merge_of(pos);
    if (m == nullptr || m->first != rank) continue;  // stale
    Symbol& r = sym[static_cast<size_t>(l.next)];
    l.id = m->second;
    l.next = r.next;
    r.prev = kDead;
    if (l.next >= 0) sym[static_cast<size_t>(l.next)].prev = pos;
    if (l.prev >= 0) push(l.prev);
    push(pos);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = sym[static_cast<size_t>(i)].next)
    out->push_back(sym[static_cast<size_t>(i)].id);
}

void Tokenizer::Impl::encode_segment(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc && !is_ascii(text)) {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(
        icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    if (U_SUCCESS(err) && !n->isNormalized(u, err)) {
      icu::UnicodeString dst = n->normalize(u, err);
      if (U_SUCCESS(err)) {
        dst.toUTF8String(normalized);
        text = normalized;
      }
    }
  }
  if (regex == nullptr) {
    bpe(text, out);
    return;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex, nullptr);
  size_t pos = 0;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (pos < text.size()) {
    const int rc = pcre2_jit_match(regex, subject, text.size(), pos, 0, md, nullptr);
    if (rc < 0) {
      bpe(text.substr(pos), out);  // no further match: the rest is one piece
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[0] > pos) bpe(text.substr(pos, ov[0] - pos), out);  // gap between matches
    if (ov[1] == ov[0]) {
      // An empty match: step one code point so the scan advances.
      uint32_t cp;
      const size_t n = std::max<size_t>(1, utf8_decode(text, ov[0], &cp));
      bpe(text.substr(ov[0], n), out);
      pos = ov[0] + n;
      continue;
    }
    bpe(text.substr(ov[0], ov[1] - ov[0]), out);
    pos = ov[1];
  }
  pcre2_match_data_free(md);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::shared_ptr<const Tokenizer>> Tokenizer::load(const std::string& path) {
  std::string file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    file = (std::filesystem::path(path) / "tokenizer.json").string();
  MX_ASSIGN_OR_RETURN(std::string text, read_text_file(file));
  return from_json(text, file);
}

// A function-try-block: a field of the wrong type that nlohmann's accessors throw on (value()
// on a number, say) becomes an error naming the file, never an exception out of this layer.
Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_json(const std::string& json_text,
                                                              const std::string& label) try {
  MX_ASSIGN_OR_RETURN(Json j, parse_json(json_text, label));
  if (!j.is_object()) return invalid_argument(label + ": not a JSON object");
  auto impl = std::make_unique<Impl>();
  const Json& model = j.contains("model") ? j["model"] : Json();
  if (!model.is_object() || model.value("type", std::string("BPE")) != "BPE") {
    return unimplemented(label + ": only BPE tokenizer models are supported");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return invalid_argument(label + ": model.vocab is missing");
  }
  // Byte-level: token text is made of mapped code points; invert to raw bytes.
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  const auto table = byte_to_codepoint();
  for (int b = 0; b < 256; ++b) cp_to_byte[table[b]] = static_cast<uint8_t>(b);
  auto to_bytes = [&](const std::string& tok, std::string* out) {
    out->clear();
    for (size_t i = 0; i < tok.size();) {
      uint32_t cp;
      const size_t n = utf8_decode(tok, i, &cp);
      auto it = n ? cp_to_byte.find(cp) : cp_to_byte.end();
      if (it == cp_to_byte.end()) return false;
      out->push_back(static_cast<char>(it->second));
      i += n;
    }
    return true;
  };
  int32_t max_id = -1;
  std::vector<std::pair<std::string, int32_t>> vocab;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 24)) {
      return invalid_argument(label + ": vocab entry '" + it.key() + "' has an invalid id");
    }
    vocab.emplace_back(it.key(), it->get<int32_t>());
    max_id = std::max(max_id, it->get<int32_t>());
  }
  std::vector<AddedToken> added;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const Json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string()) {
        return invalid_argument(label + ": an added_tokens entry lacks id or content");
      }
      // The same bound as vocab ids: the id sizes the id tables.
      if (a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > (1 << 24)) {
        return invalid_argument(label + ": added token id " + a["id"].dump() +
                                " is outside [0, 2^24]");
      }
      added.push_back(
          {a["content"].get<std::string>(), a["id"].get<int32_t>(), a.value("special", false)});
      if (added.back().id < 0 || added.back().content.empty()) {
        return invalid_argument(label + ": invalid added token '" + added.back().content + "'");
      }
      max_id = std::max(max_id, added.back().id);
    }
  }
  impl->id_to_bytes.assign(static_cast<size_t>(max_id + 1), std::string());
  impl->special.assign(static_cast<size_t>(max_id + 1), 0);
  std::string raw;
  for (const auto& [tok, id] : vocab) {
    if (!to_bytes(tok, &raw)) {
      return invalid_argument(label + ": vocab token '" + tok + "' is not byte-level encoded");
    }
    impl->id_to_bytes[static_cast<size_t>(id)] = raw;
    impl->bytes_to_id[raw] = id;
    impl->text_to_id[tok] = id;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = impl->bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == impl->bytes_to_id.end()) {
      return invalid_argument(label + ": the vocabulary lacks the byte token for 0x" +
                              std::to_string(b) + " (not a byte-level BPE)");
    }
    impl->byte_id[b] = it->second;
  }
  for (const AddedToken& a : added) {
    impl->id_to_bytes[static_cast<size_t>(a.id)] = a.content;
    impl->special[static_cast<size_t>(a.id)] = a.special ? 1 : 0;
    impl->text_to_id[a.content] = a.id;
  }
  std::sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  impl->added = std::move(added);

  // Merges: "a b" strings or ["a", "b"] pairs.
  if (model.contains("merges") && model["merges"].is_array()) {
    int32_t rank = 0;
    for (const Json& m : model["merges"]) {
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos)
          return invalid_argument(label + ": merge '" + s + "' has no space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        return invalid_argument(label + ": merge #" + std::to_string(rank) + " is malformed");
      }
      auto ia = impl->text_to_id.find(a), ib = impl->text_to_id.find(b),
           im = impl->text_to_id.find(a + b);
      if (ia == impl->text_to_id.end() || ib == impl->text_to_id.end() ||
          im == impl->text_to_id.end()) {
        return invalid_argument(label + ": merge '" + a + " " + b +
                                "' names a token not in the vocabulary");
      }
      impl->merges.emplace(pair_key(ia->second, ib->second), std::make_pair(rank, im->second));
      ++rank;
    }
  }

  // Normalizer: NFC (alone or in a Sequence) is what Qwen uses; anything else is refused.
  const Json& norm = j.contains("normalizer") ? j["normalizer"] : Json();
  std::vector<Json> norms;
  if (norm.is_object() && norm.value("type", "") == "Sequence" && norm.contains("normalizers")) {
    for (const Json& n : norm["normalizers"]) norms.push_back(n);
  } else if (norm.is_object()) {
    norms.push_back(norm);
  }
  for (const Json& n : norms) {
    const std::string type = n.value("type", "");
    if (type == "NFC")
      impl->nfc = true;
    else
      return unimplemented(label + ": normalizer '" + type + "' is not supported");
  }

  // Pre-tokenizer: a Split regex (Isolated) followed by ByteLevel without its own regex.
  const Json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json();
  std::vector<Json> pres;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers")) {
    for (const Json& p : pre["pretokenizers"]) pres.push_back(p);
  } else if (pre.is_object()) {
    pres.push_back(pre);
  }
  for (const Json& p : pres) {
    const std::string type = p.value("type", "");
    if (type == "Split" && p.contains("pattern") && p["pattern"].contains("Regex")) {
      if (p.value("behavior", "Isolated") != "Isolated" || p.value("invert", false)) {
        return unimplemented(label + ": Split pre-tokenizer behaviour is not supported");
      }
      const std::string pat = p["pattern"]["Regex"].get<std::string>();
      int err;
      PCRE2_SIZE off;
      impl->regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.c_str()), pat.size(),
                                  PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
      if (impl->regex == nullptr) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return invalid_argument(label + ": pre-tokenizer regex does not compile at offset " +
                                std::to_string(off) + ": " + reinterpret_cast<char*>(msg));
      }
      if (pcre2_jit_compile(impl->regex, PCRE2_JIT_COMPLETE) != 0) {
        return unimplemented(label + ": PCRE2 JIT is unavailable for the pre-tokenizer regex");
      }
    } else if (type == "ByteLevel") {
      if (p.value("use_regex", true) && impl->regex == nullptr) {
        return unimplemented(label + ": ByteLevel with its built-in regex is not supported");
      }
    } else {
      return unimplemented(label + ": pre-tokenizer '" + type + "' is not supported");
    }
  }
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
} catch (const Json::exception& e) {
  return invalid_argument(label + ": a field has the wrong type: " + e.what());
}

std::vector<int32_t> Tokenizer::encode(std::string_view input) const {
  const std::string text = repair_utf8(input);
  std::vector<int32_t> out;
  // Added tokens are matched on the raw text first: the earliest occurrence, longest on ties.
  // Each token's next occurrence is remembered and searched again only once the cursor has
  // passed it, so a prompt full of special tokens is scanned about once per added token rather
  // than once per occurrence.
  const std::vector<AddedToken>& added = impl_->added;
  const std::string_view all = text;
  std::vector<size_t> next(added.size());
  for (size_t k = 0; k < added.size(); ++k) next[k] = all.find(added[k].content);
  size_t cursor = 0;
  while (cursor < all.size()) {
    size_t best = std::string_view::npos;
    const AddedToken* hit = nullptr;
    for (size_t k = 0; k < added.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < cursor)
        next[k] = all.find(added[k].content, cursor);
      if (next[k] < best) {
        best = next[k];
        hit = &added[k];
      }
    }
    if (hit == nullptr) {
      impl_->encode_segment(all.substr(cursor), &out);
      break;
    }
    impl_->encode_segment(all.substr(cursor, best - cursor), &out);
    out.push_back(hit->id);
    cursor = best + hit->content.size();
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && impl_->special[static_cast<size_t>(id)]) continue;
    bytes += impl_->id_to_bytes[static_cast<size_t>(id)];
  }
  return repair_utf8(bytes);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= vocab_size()) return kEmpty;
  return impl_->id_to_bytes[static_cast<size_t>(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[static_cast<size_t>(id)] != 0;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token_text) const {
  auto it = impl_->text_to_id.find(std::string(token_text));
  if (it == impl_->text_to_id.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_bytes.size()); }
size_t Tokenizer::max_token_bytes() const {
  size_t n = 1;
  for (const std::string& b : impl_->id_to_bytes) n = std::max(n, b.size());
  for (const AddedToken& a : impl_->added) n = std::max(n, a.content.size());
  return n;
}
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

std::string IncrementalDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += tok_.token_bytes(id);
  const size_t n = utf8_complete_prefix(pending_);
  std::string out = repair_utf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out = repair_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace mx
