#include "loader/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "core/json_util.h"

namespace mx {
namespace {

// A header larger than this is not a checkpoint header but a corrupt length.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

Result<TensorInfo> parse_entry(const std::string& name, const Json& v, uint64_t data_size,
                               const std::string& label) {
  const std::string where = label + ": tensor '" + name + "'";
  if (!v.is_object()) return data_loss(where + ": header entry is not an object");
  TensorInfo t;
  t.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return data_loss(where + ": missing string 'dtype'");
  auto dtype = dtype_from_name(dt->get<std::string>());
  if (!dtype) return data_loss(where + ": unknown dtype '" + dt->get<std::string>() + "'");
  t.dtype = *dtype;
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return data_loss(where + ": missing list 'shape'");
  for (const Json& d : *sh) {
    if (!d.is_number_unsigned())
      return data_loss(where + ": shape has a non-integer or negative dimension");
    const uint64_t u = d.get<uint64_t>();
    if (u > (1ull << 48))
      return data_loss(where + ": shape dimension " + std::to_string(u) + " is implausible");
    t.shape.push_back(static_cast<int64_t>(u));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return data_loss(where + ": 'data_offsets' must be two non-negative integers");
  }
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  if (t.begin > t.end) return data_loss(where + ": data_offsets begin > end");
  if (t.end > data_size) {
    return data_loss(where + ": data_offsets end " + std::to_string(t.end) +
                     " is past the data area of " + std::to_string(data_size) +
                     " bytes (file truncated?)");
  }
  const int64_t numel = shape_numel(t.shape);
  if (numel < 0) return data_loss(where + ": shape " + shape_to_string(t.shape) + " overflows");
  const uint64_t want = static_cast<uint64_t>(numel);
  const uint64_t esize = dtype_size(t.dtype);
  if (want > UINT64_MAX / esize || want * esize != t.end - t.begin) {
    return data_loss(where + ": " + std::string(dtype_name(t.dtype)) + shape_to_string(t.shape) +
                     " needs " + std::to_string(want * esize) + " bytes but data_offsets span " +
                     std::to_string(t.end - t.begin));
  }
  return t;
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors(const uint8_t* data, size_t size,
                                            const std::string& label) {
  if (size < 8) {
    return data_loss(label + ": file is " + std::to_string(size) +
                     " bytes, shorter than the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > size - 8) {
    return data_loss(label + ": header length " + std::to_string(n) +
                     " runs past the end of the file (" + std::to_string(size) + " bytes)");
  }
  if (n > kMaxHeaderBytes)
    return data_loss(label + ": header length " + std::to_string(n) + " is implausibly large");
  const std::string text(reinterpret_cast<const char*>(data + 8), n);
  auto parsed = parse_json(text, label + " header");
  if (!parsed.is_ok()) return data_loss(parsed.status().message());
  const Json& j = *parsed;
  if (!j.is_object()) return data_loss(label + ": header is not a JSON object");

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return data_loss(label + ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return data_loss(label + ": __metadata__ value '" + m.key() + "' is not a string");
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    MX_ASSIGN_OR_RETURN(TensorInfo t, parse_entry(it.key(), *it, data_size, label));
    h.tensors.push_back(std::move(t));
  }
  std::stable_sort(h.tensors.begin(), h.tensors.end(),
                   [](const TensorInfo& a, const TensorInfo& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < h.tensors.size(); ++i) {
    const TensorInfo& a = h.tensors[i - 1];
    const TensorInfo& b = h.tensors[i];
    if (a.end > b.begin && a.end != a.begin && b.end != b.begin) {
      return data_loss(label + ": tensors '" + a.name + "' and '" + b.name + "' overlap");
    }
  }
  return h;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  MX_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  MX_ASSIGN_OR_RETURN(SafetensorsHeader header,
                      parse_safetensors(file->data(), file->size(), path));
  SafetensorsFile f;
  f.file_ = std::move(file);
  f.header_ = std::move(header);
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) f.index_[f.header_.tensors[i].name] = i;
  return f;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

Result<Tensor> SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) return not_found(path() + ": no tensor '" + name + "'");
  const uint8_t* p = file_->data() + header_.data_start + t->begin;
  auto storage = Storage::view_of_file(file_, p, t->end - t->begin);
  return Tensor::from_storage(std::move(storage), t->dtype, t->shape);
}

Status SafetensorsWriter::add(const std::string& name, DType dtype, const Shape& shape,
                              const void* bytes, size_t size) {
  const int64_t numel = shape_numel(shape);
  if (numel < 0 || static_cast<size_t>(numel) * dtype_size(dtype) != size) {
    return invalid_argument("tensor '" + name + "': " + std::string(dtype_name(dtype)) +
                            shape_to_string(shape) + " does not match " + std::to_string(size) +
                            " bytes");
  }
  if (name == "__metadata__") return invalid_argument("'__metadata__' is not a tensor name");
  for (const Entry& e : entries_) {
    if (e.name == name) return invalid_argument("tensor '" + name + "' added twice");
  }
  Entry e{name, dtype, shape, data_.size(), data_.size() + size};
  data_.append(static_cast<const char*>(bytes), size);
  entries_.push_back(std::move(e));
  return Status::ok();
}

Status SafetensorsWriter::add(const std::string& name, const Tensor& tensor) {
  const Tensor c = tensor.is_contiguous() ? tensor : tensor.contiguous_copy();
  return add(name, c.dtype(), c.shape(), c.data(), c.nbytes());
}

std::string SafetensorsWriter::serialize() const {
  Json header = Json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", std::string(dtype_name(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {e.begin, e.end}}};
  }
  std::string h = header.dump();
  h.append((8 - (8 + h.size()) % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += h;
  out += data_;
  return out;
}

Status SafetensorsWriter::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(path + ": cannot open for writing");
    const std::string bytes = serialize();
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return io_error(path + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return io_error(path + ": rename failed");
  return Status::ok();
}

}  // namespace mx
