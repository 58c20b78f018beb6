#include "loader/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <type_traits>
#include <unordered_set>

namespace mx {

// Values are copied out with memcpy as they lie in the file: the file is little-endian, so the
// host must be too (big-endian files are detected and refused below).
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes little-endian");

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kDefaultAlignment = 32;
// Arrays of arrays are legal; a depth beyond this is a corrupt or hostile file, and bounding it
// keeps the recursion shallow.
constexpr int kMaxArrayDepth = 8;
// Each parsed value costs ~100 bytes of memory while its smallest encoding is one byte: the
// bound keeps a large file from turning into a far larger allocation. Real tokenizers hold
// about a million values (262k tokens, scores, types, merges).
constexpr uint64_t kMaxMetadataValues = 1ull << 23;
// The smallest encodings, used to bound counts by the bytes left before reserving anything.
constexpr uint64_t kMinKvBytes = 8 + 4;                  // key length, value type
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset
constexpr uint32_t kMaxDims = 4;
// Counts are checked against the bytes left, but a count near that bound in a large file
// would still reserve far more memory than the entries it turns out to have.
constexpr uint64_t kReserveLimit = 1u << 12;

// A name from the file, quoted for a message: bytes outside printable ASCII are escaped and a
// long (corrupt) name is cut, so a damaged file cannot garble the log.
std::string shown_name(std::string_view name) {
  constexpr size_t kMaxShown = 96;
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\x%02x", c);
      out += esc;
    }
  }
  if (name.size() > kMaxShown) out += "...";
  return out + "'";
}

// A bounds-checked reader over the file image. `where_` names the key or tensor being read so
// that a truncation says what was cut.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& label)
      : data_(data), size_(size), label_(label) {}

  size_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  void set_where(std::string where) { where_ = std::move(where); }

  // "<file>: key 'x': <what>"
  Status error(const std::string& what) const {
    return data_loss(label_ + (where_.empty() ? "" : ": " + where_) + ": " + what);
  }
  Status truncated(const char* what, uint64_t need) const {
    return error(std::string(what) + " (" + std::to_string(need) + " bytes at offset " +
                 std::to_string(pos_) + ") runs past the end of the file (" +
                 std::to_string(size_) + " bytes; truncated?)");
  }

  template <typename T>
  Status read(T* out, const char* what) {
    if (remaining() < sizeof(T)) return truncated(what, sizeof(T));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string* out, const char* what) {
    uint64_t n = 0;
    MX_RETURN_IF_ERROR(read(&n, what));
    if (n > remaining()) {
      return error(std::string(what) + " has length " + std::to_string(n) + " at offset " +
                   std::to_string(pos_ - 8) + ", past the end of the file (" +
                   std::to_string(size_) + " bytes)");
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return Status::ok();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& label_;
  std::string where_;
};

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kF64); }

// Bytes of the smallest encoding of one value of type `t`.
uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kString:  // the length
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kArray:  // element type + count
      return 12;
  }
  return 1;
}

template <typename T>
Status read_integer(Cursor& c, GgufValue* v) {
  T x{};
  MX_RETURN_IF_ERROR(c.read(&x, "integer value"));
  if constexpr (std::is_signed_v<T>) {
    v->i = static_cast<int64_t>(x);
    v->u = x >= 0 ? static_cast<uint64_t>(x) : 0;
  } else {
    v->u = static_cast<uint64_t>(x);
    v->i = v->u <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(v->u) : 0;
  }
  return Status::ok();
}

struct ValueBudget {
  uint64_t left = kMaxMetadataValues;
};

Status parse_value(Cursor& c, GgufValueType type, int depth, ValueBudget& budget, GgufValue* v);

Status parse_array(Cursor& c, int depth, ValueBudget& budget, GgufValue* v) {
  uint32_t elem = 0;
  MX_RETURN_IF_ERROR(c.read(&elem, "array element type"));
  if (!valid_value_type(elem)) {
    return c.error("array has unknown element type " + std::to_string(elem));
  }
  v->elem_type = static_cast<GgufValueType>(elem);
  if (v->elem_type == GgufValueType::kArray && depth + 1 >= kMaxArrayDepth) {
    return c.error("arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  }
  uint64_t n = 0;
  MX_RETURN_IF_ERROR(c.read(&n, "array length"));
  const uint64_t min_bytes = min_value_bytes(v->elem_type);
  if (n > c.remaining() / min_bytes) {
    return c.error("array length " + std::to_string(n) + " of " +
                   std::string(gguf_value_type_name(v->elem_type)) +
                   " runs past the end of the file (" + std::to_string(c.remaining()) +
                   " bytes left)");
  }
  if (n > budget.left) {
    return c.error("metadata holds more than " + std::to_string(kMaxMetadataValues) +
                   " values in all; not a plausible checkpoint");
  }
  budget.left -= n;
  // Grown as elements are read, so memory follows the bytes actually there.
  v->array.reserve(static_cast<size_t>(std::min<uint64_t>(n, kReserveLimit)));
  for (uint64_t k = 0; k < n; ++k) {
    MX_RETURN_IF_ERROR(parse_value(c, v->elem_type, depth + 1, budget, &v->array.emplace_back()));
  }
  return Status::ok();
}

Status parse_value(Cursor& c, GgufValueType type, int depth, ValueBudget& budget, GgufValue* v) {
  v->type = type;
  switch (type) {
    case GgufValueType::kU8:
      return read_integer<uint8_t>(c, v);
    case GgufValueType::kI8:
      return read_integer<int8_t>(c, v);
    case GgufValueType::kU16:
      return read_integer<uint16_t>(c, v);
    case GgufValueType::kI16:
      return read_integer<int16_t>(c, v);
    case GgufValueType::kU32:
      return read_integer<uint32_t>(c, v);
    case GgufValueType::kI32:
      return read_integer<int32_t>(c, v);
    case GgufValueType::kU64:
      return read_integer<uint64_t>(c, v);
    case GgufValueType::kI64:
      return read_integer<int64_t>(c, v);
    case GgufValueType::kF32: {
      float x = 0;
      MX_RETURN_IF_ERROR(c.read(&x, "f32 value"));
      v->f = x;
      return Status::ok();
    }
    case GgufValueType::kF64:
      return c.read(&v->f, "f64 value");
    case GgufValueType::kBool: {
      uint8_t x = 0;
      MX_RETURN_IF_ERROR(c.read(&x, "bool value"));
      v->b = x != 0;
      return Status::ok();
    }
    case GgufValueType::kString:
      return c.read_string(&v->str, "string value");
    case GgufValueType::kArray:
      return parse_array(c, depth, budget, v);
  }
  return c.error("unknown value type " + std::to_string(static_cast<uint32_t>(type)));
}

Status parse_preamble(Cursor& c, GgufHeader* h, uint64_t* tensor_count, uint64_t* kv_count) {
  char magic[4] = {};
  MX_RETURN_IF_ERROR(c.read(&magic, "magic"));
  if (std::memcmp(magic, kMagic, 4) != 0) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "%02x %02x %02x %02x", static_cast<uint8_t>(magic[0]),
                  static_cast<uint8_t>(magic[1]), static_cast<uint8_t>(magic[2]),
                  static_cast<uint8_t>(magic[3]));
    return c.error(std::string("not a GGUF file (bad magic ") + hex + ", want \"GGUF\")");
  }
  MX_RETURN_IF_ERROR(c.read(&h->version, "version"));
  const uint32_t swapped = __builtin_bswap32(h->version);
  if (h->version == 0 || h->version > 3) {
    if (swapped >= 1 && swapped <= 3) {
      return c.error("big-endian GGUF (byte-swapped version " + std::to_string(swapped) +
                     ") is not supported; only little-endian files are read");
    }
    return c.error("GGUF version " + std::to_string(h->version) +
                   " is not supported (only versions 2 and 3)");
  }
  if (h->version == 1) return c.error("GGUF version 1 is not supported (only versions 2 and 3)");
  MX_RETURN_IF_ERROR(c.read(tensor_count, "tensor count"));
  MX_RETURN_IF_ERROR(c.read(kv_count, "metadata count"));
  const uint64_t left = c.remaining();
  if (*kv_count > left / kMinKvBytes) {
    return c.error("metadata count " + std::to_string(*kv_count) + " cannot fit in the " +
                   std::to_string(left) + " bytes left in the file");
  }
  if (*tensor_count > left / kMinTensorInfoBytes ||
      *kv_count * kMinKvBytes + *tensor_count * kMinTensorInfoBytes > left) {
    return c.error("tensor count " + std::to_string(*tensor_count) + " cannot fit in the " +
                   std::to_string(left) + " bytes left in the file");
  }
  return Status::ok();
}

Status parse_metadata(Cursor& c, uint64_t kv_count, GgufHeader* h) {
  ValueBudget budget;
  for (uint64_t k = 0; k < kv_count; ++k) {
    c.set_where("metadata entry " + std::to_string(k));
    std::string key;
    MX_RETURN_IF_ERROR(c.read_string(&key, "key"));
    c.set_where("key " + shown_name(key));
    uint32_t type = 0;
    MX_RETURN_IF_ERROR(c.read(&type, "value type"));
    if (!valid_value_type(type)) return c.error("unknown value type " + std::to_string(type));
    GgufValue v;
    MX_RETURN_IF_ERROR(parse_value(c, static_cast<GgufValueType>(type), 0, budget, &v));
    if (!h->metadata.emplace(std::move(key), std::move(v)).second) {
      return c.error("duplicate key");
    }
  }
  c.set_where("");
  auto it = h->metadata.find("general.alignment");
  if (it != h->metadata.end()) {
    c.set_where("key 'general.alignment'");
    const GgufValue& a = it->second;
    if (a.type != GgufValueType::kU32) {
      return c.error("must be u32, not " + std::string(gguf_value_type_name(a.type)));
    }
    if (a.u == 0 || (a.u & (a.u - 1)) != 0) {
      return c.error("alignment " + std::to_string(a.u) + " is not a power of two");
    }
    h->alignment = a.u;
    c.set_where("");
  }
  return Status::ok();
}

std::string dims_to_string(const std::vector<int64_t>& ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

// Reads one tensor info and checks everything that does not need the data area's position.
Status parse_tensor_info(Cursor& c, uint64_t index, GgufTensorInfo* t) {
  c.set_where("tensor info " + std::to_string(index));
  MX_RETURN_IF_ERROR(c.read_string(&t->name, "tensor name"));
  c.set_where("tensor " + shown_name(t->name));
  uint32_t n_dims = 0;
  MX_RETURN_IF_ERROR(c.read(&n_dims, "n_dims"));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return c.error("n_dims " + std::to_string(n_dims) + " is out of range (1 to 4)");
  }
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t x = 0;
    MX_RETURN_IF_ERROR(c.read(&x, "dimension"));
    if (x == 0 || x > static_cast<uint64_t>(INT64_MAX)) {
      return c.error("dimension ne[" + std::to_string(d) +
                     "] = " + std::to_string(static_cast<int64_t>(x)) + " is not positive");
    }
    t->ne.push_back(static_cast<int64_t>(x));
    if (__builtin_mul_overflow(numel, static_cast<int64_t>(x), &numel)) {
      return c.error("dimensions overflow int64 (ne[0.." + std::to_string(d) +
                     "] = " + dims_to_string(t->ne) + ")");
    }
  }
  uint32_t type_id = 0;
  MX_RETURN_IF_ERROR(c.read(&type_id, "ggml type"));
  const GgmlTypeInfo* info = ggml_type_info(type_id);
  if (info == nullptr) return c.error("unknown ggml type id " + std::to_string(type_id));
  if (!info->supported) {
    return c.error(
        "ggml type " + std::string(info->name) + " (id " + std::to_string(type_id) +
        ") is not supported; supported types: " + std::string(ggml_supported_type_list()));
  }
  t->type = info->type;
  // A row so long that its byte count overflows is refused before ggml_row_bytes sees it.
  if (info->block > 0 && info->block_bytes > 0 &&
      t->ne[0] / info->block > INT64_MAX / info->block_bytes) {
    return c.error("byte size of " + dims_to_string(t->ne) + " overflows");
  }
  const int64_t row_bytes = ggml_row_bytes(t->type, t->ne[0]);
  if (row_bytes < 0) {
    return c.error("row length ne[0] = " + std::to_string(t->ne[0]) + " is not a multiple of the " +
                   std::string(info->name) + " block of " + std::to_string(info->block));
  }
  const int64_t rows = numel / t->ne[0];
  int64_t bytes = 0;
  if (__builtin_mul_overflow(rows, row_bytes, &bytes)) {
    return c.error("byte size of " + dims_to_string(t->ne) + " overflows");
  }
  t->bytes = static_cast<uint64_t>(bytes);
  return c.read(&t->offset, "data offset");
}

// Places every tensor in the data area: aligned, inside the file and not overlapping.
Status place_tensors(const uint8_t* data, size_t size, const std::string& label, GgufHeader* h) {
  const uint64_t data_size = size > h->data_start ? size - h->data_start : 0;
  for (GgufTensorInfo& t : h->tensors) {
    const std::string where = label + ": tensor " + shown_name(t.name) + ": ";
    if (t.offset % h->alignment != 0) {
      return data_loss(where + "data offset " + std::to_string(t.offset) +
                       " is not a multiple of the alignment " + std::to_string(h->alignment));
    }
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      return data_loss(where + "data at offset " + std::to_string(t.offset) + " (" +
                       std::to_string(t.bytes) + " bytes) lies past the end of the file (" +
                       std::to_string(data_size) + " data bytes from " +
                       std::to_string(h->data_start) + "; truncated?)");
    }
    t.data = data + h->data_start + t.offset;
  }
  std::vector<size_t> order(h->tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return h->tensors[a].offset < h->tensors[b].offset; });
  // Sorted by start, any overlap shows up between neighbours.
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensorInfo& a = h->tensors[order[i - 1]];
    const GgufTensorInfo& b = h->tensors[order[i]];
    if (a.offset + a.bytes > b.offset) {
      return data_loss(label + ": tensors " + shown_name(a.name) + " and " + shown_name(b.name) +
                       " overlap in the data area");
    }
  }
  return Status::ok();
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
      return "u8";
    case GgufValueType::kI8:
      return "i8";
    case GgufValueType::kU16:
      return "u16";
    case GgufValueType::kI16:
      return "i16";
    case GgufValueType::kU32:
      return "u32";
    case GgufValueType::kI32:
      return "i32";
    case GgufValueType::kF32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kU64:
      return "u64";
    case GgufValueType::kI64:
      return "i64";
    case GgufValueType::kF64:
      return "f64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
      return true;
    default:
      return false;
  }
}

Result<GgufHeader> parse_gguf(const uint8_t* data, size_t size, const std::string& label) {
  Cursor c(data, size, label);
  GgufHeader h;
  h.alignment = kDefaultAlignment;  // unless general.alignment says otherwise
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  MX_RETURN_IF_ERROR(parse_preamble(c, &h, &tensor_count, &kv_count));
  MX_RETURN_IF_ERROR(parse_metadata(c, kv_count, &h));
  h.tensors.reserve(static_cast<size_t>(std::min<uint64_t>(tensor_count, kReserveLimit)));
  std::unordered_set<std::string> names;
  for (uint64_t k = 0; k < tensor_count; ++k) {
    GgufTensorInfo t;
    MX_RETURN_IF_ERROR(parse_tensor_info(c, k, &t));
    if (!names.insert(t.name).second) return c.error("duplicate tensor name");
    h.tensors.push_back(std::move(t));
  }
  h.data_start = (c.pos() + h.alignment - 1) / h.alignment * h.alignment;
  MX_RETURN_IF_ERROR(place_tensors(data, size, label, &h));
  return h;
}

// ---- GgufFile ----

namespace {

// "<prefix>-00002-of-00005.gguf" -> {prefix, 2, 5}.
struct SplitName {
  std::string prefix;
  int no = 0;
  int count = 0;
};

std::optional<SplitName> parse_split_name(const std::string& path) {
  constexpr std::string_view kTail = "-00000-of-00000.gguf";
  if (path.size() <= kTail.size()) return std::nullopt;
  const std::string_view tail = std::string_view(path).substr(path.size() - kTail.size());
  SplitName s;
  for (size_t i = 0; i < kTail.size(); ++i) {
    const char want = kTail[i];
    const char got = tail[i];
    if (want == '0') {
      if (got < '0' || got > '9') return std::nullopt;
      int& field = i < 6 ? s.no : s.count;
      field = field * 10 + (got - '0');
    } else if (want != got) {
      return std::nullopt;
    }
  }
  s.prefix = path.substr(0, path.size() - kTail.size());
  return s;
}

std::string split_part_path(const std::string& prefix, int no, int count) {
  char tail[32];
  std::snprintf(tail, sizeof(tail), "-%05d-of-%05d.gguf", no, count);
  return prefix + tail;
}

// An integer key of a part, absent -> nullopt.
Result<std::optional<int64_t>> split_key(const std::map<std::string, GgufValue>& metadata,
                                         const std::string& key, const std::string& label) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::optional<int64_t>();
  const GgufValue& v = it->second;
  if (!v.is_integer() || (v.type == GgufValueType::kU64 && v.u > uint64_t{INT64_MAX})) {
    return invalid_argument(label + ": key '" + key + "' must be an integer, not " +
                            std::string(gguf_value_type_name(v.type)));
  }
  return std::optional<int64_t>(v.i);
}

struct Part {
  std::shared_ptr<const MappedFile> file;
  GgufHeader header;
};

Result<Part> open_part(const std::string& path) {
  MX_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  MX_ASSIGN_OR_RETURN(GgufHeader header, parse_gguf(file->data(), file->size(), path));
  return Part{std::move(file), std::move(header)};
}

// Checks split.no / split.count of part `no` (0-based) of `count`.
Status check_split_keys(const Part& p, int no, int count) {
  const std::string& label = p.file->path();
  MX_ASSIGN_OR_RETURN(std::optional<int64_t> c, split_key(p.header.metadata, "split.count", label));
  MX_ASSIGN_OR_RETURN(std::optional<int64_t> n, split_key(p.header.metadata, "split.no", label));
  if (count == 1 && !c && !n) return Status::ok();
  if (!c || *c != count) {
    return data_loss(label + ": key 'split.count' is " + (c ? std::to_string(*c) : "absent") +
                     " but the file name says " + std::to_string(count) + " parts");
  }
  if (!n || *n != no) {
    return data_loss(label + ": key 'split.no' is " + (n ? std::to_string(*n) : "absent") +
                     " but the file name says part " + std::to_string(no + 1) + " (split.no " +
                     std::to_string(no) + ")");
  }
  return Status::ok();
}

// Every part of the checkpoint `path` names, with the split keys checked.
Result<std::vector<Part>> open_parts(const std::string& path) {
  std::vector<Part> parts;
  const std::optional<SplitName> split = parse_split_name(path);
  if (!split) {
    MX_ASSIGN_OR_RETURN(Part p, open_part(path));
    MX_ASSIGN_OR_RETURN(std::optional<int64_t> c,
                        split_key(p.header.metadata, "split.count", path));
    if (c && *c > 1) {
      return invalid_argument(path + ": key 'split.count' is " + std::to_string(*c) +
                              " but the name does not follow NAME-00001-of-0000N.gguf, so the "
                              "other parts cannot be found");
    }
    parts.push_back(std::move(p));
    return parts;
  }
  if (split->count < 1 || split->no < 1 || split->no > split->count) {
    return invalid_argument(path + ": split name says part " + std::to_string(split->no) + " of " +
                            std::to_string(split->count));
  }
  for (int i = 1; i <= split->count; ++i) {
    auto p = open_part(split_part_path(split->prefix, i, split->count));
    if (!p.is_ok()) {
      return p.status().with_context("split part " + std::to_string(i) + " of " +
                                     std::to_string(split->count) + " of " + path);
    }
    MX_RETURN_IF_ERROR(check_split_keys(*p, i - 1, split->count));
    parts.push_back(std::move(p).value());
  }
  return parts;
}

Status check_tensor_total(const std::vector<Part>& parts) {
  size_t total = 0;
  for (const Part& p : parts) total += p.header.tensors.size();
  for (const Part& p : parts) {
    const std::string& label = p.file->path();
    MX_ASSIGN_OR_RETURN(std::optional<int64_t> n,
                        split_key(p.header.metadata, "split.tensors.count", label));
    if (n && *n != static_cast<int64_t>(total)) {
      return data_loss(label + ": key 'split.tensors.count' is " + std::to_string(*n) +
                       " but the parts hold " + std::to_string(total) + " tensors");
    }
  }
  return Status::ok();
}

}  // namespace

Result<GgufFile> GgufFile::open(const std::string& path) {
  MX_ASSIGN_OR_RETURN(std::vector<Part> parts, open_parts(path));
  MX_RETURN_IF_ERROR(check_tensor_total(parts));
  GgufFile f;
  f.path_ = path;
  f.version_ = parts[0].header.version;
  f.metadata_ = std::move(parts[0].header.metadata);
  for (size_t i = 0; i < parts.size(); ++i) {
    for (GgufTensorInfo& t : parts[i].header.tensors) {
      t.file = static_cast<int>(i);
      auto [it, inserted] = f.index_.emplace(t.name, f.tensors_.size());
      if (!inserted) {
        const size_t first = static_cast<size_t>(f.tensors_[it->second].file);
        return data_loss(parts[i].file->path() + ": tensor " + shown_name(t.name) + " is also in " +
                         parts[first].file->path());
      }
      f.tensors_.push_back(std::move(t));
    }
  }
  for (Part& p : parts) f.files_.push_back(std::move(p.file));
  return f;
}

bool GgufFile::looks_like_gguf(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  if (!in.read(magic, 4)) return false;
  return std::memcmp(magic, kMagic, 4) == 0;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Result<const GgufValue*> find_key(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return not_found(f.path() + ": no metadata key '" + key + "'");
  return v;
}

Status wrong_type(const GgufFile& f, const std::string& key, const GgufValue& v, const char* want) {
  return invalid_argument(f.path() + ": key '" + key + "' is " +
                          std::string(gguf_value_type_name(v.type)) + ", want " + want);
}

}  // namespace

Result<int64_t> GgufFile::get_int(const std::string& key) const {
  MX_ASSIGN_OR_RETURN(const GgufValue* v, find_key(*this, key));
  if (!v->is_integer()) return wrong_type(*this, key, *v, "an integer");
  if (v->type == GgufValueType::kU64 && v->u > uint64_t{INT64_MAX}) {
    return invalid_argument(path_ + ": key '" + key + "' = " + std::to_string(v->u) +
                            " does not fit in int64");
  }
  return v->i;
}

Result<double> GgufFile::get_float(const std::string& key) const {
  MX_ASSIGN_OR_RETURN(const GgufValue* v, find_key(*this, key));
  if (v->is_float()) return v->f;
  if (!v->is_integer()) return wrong_type(*this, key, *v, "a number");
  if (v->type == GgufValueType::kU64) return static_cast<double>(v->u);
  return static_cast<double>(v->i);
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  MX_ASSIGN_OR_RETURN(const GgufValue* v, find_key(*this, key));
  if (v->type != GgufValueType::kBool) return wrong_type(*this, key, *v, "bool");
  return v->b;
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
  MX_ASSIGN_OR_RETURN(const GgufValue* v, find_key(*this, key));
  if (v->type != GgufValueType::kString) return wrong_type(*this, key, *v, "string");
  return v->str;
}

Result<const GgufValue*> GgufFile::get_array(const std::string& key, GgufValueType elem) const {
  MX_ASSIGN_OR_RETURN(const GgufValue* v, find_key(*this, key));
  const std::string want = "array of " + std::string(gguf_value_type_name(elem));
  if (v->type != GgufValueType::kArray) return wrong_type(*this, key, *v, want.c_str());
  if (v->elem_type != elem) {
    return invalid_argument(path_ + ": key '" + key + "' is an array of " +
                            std::string(gguf_value_type_name(v->elem_type)) + ", want " + want);
  }
  return v;
}

}  // namespace mx
