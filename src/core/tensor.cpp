#include "core/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "core/check.h"
#include "core/huge_pages.h"

namespace mx {

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Placement placement) {
  std::shared_ptr<Storage> s(new Storage());
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = placement == Placement::kHugePages
                ? huge_alloc(rounded == 0 ? 64 : rounded)
                : std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) throw std::bad_alloc();
  s->placement_ = placement;
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  s->data_ = static_cast<uint8_t*>(p);
  s->size_ = bytes;
  s->owned_ = true;
  return s;
}

std::shared_ptr<Storage> Storage::view_of_file(std::shared_ptr<const MappedFile> file,
                                               const uint8_t* data, size_t bytes) {
  MX_CHECK(file != nullptr);
  MX_CHECK(data >= file->data() && data + bytes <= file->data() + file->size());
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = const_cast<uint8_t*>(data);
  s->size_ = bytes;
  s->file_ = std::move(file);
  return s;
}

Storage::~Storage() {
  if (!owned_) return;
  if (placement_ == Placement::kHugePages) {
    huge_free(data_, size_ == 0 ? 64 : (size_ + 63) / 64 * 64);
  } else {
    std::free(data_);
  }
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

namespace {
Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}
}  // namespace

Tensor Tensor::empty(DType dtype, Shape shape, Placement placement) {
  const int64_t n = shape_numel(shape);
  MX_CHECK(n >= 0);
  return from_storage(Storage::allocate(static_cast<size_t>(n) * dtype_size(dtype), placement),
                      dtype, std::move(shape));
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, DType dtype, Shape shape,
                            size_t offset) {
  const int64_t n = shape_numel(shape);
  MX_CHECK(n >= 0);
  MX_CHECK(offset + static_cast<size_t>(n) * dtype_size(dtype) <= storage->size());
  Tensor t;
  t.storage_ = std::move(storage);
  t.offset_ = offset;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

int64_t Tensor::numel() const { return shape_numel(shape_); }

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

void* Tensor::mutable_data() {
  uint8_t* base = storage_->mutable_data();
  return base == nullptr ? nullptr : base + offset_;
}

Tensor Tensor::select(int dim, int64_t index) const {
  if (dim < 0) dim += rank();
  MX_CHECK(dim >= 0 && dim < rank());
  MX_CHECK(index >= 0 && index < shape_[dim]);
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(index * strides_[dim]) * dtype_size(dtype_);
  t.shape_.erase(t.shape_.begin() + dim);
  t.strides_.erase(t.strides_.begin() + dim);
  return t;
}

Tensor Tensor::slice(int dim, int64_t begin, int64_t end) const {
  if (dim < 0) dim += rank();
  MX_CHECK(dim >= 0 && dim < rank());
  MX_CHECK(0 <= begin && begin <= end && end <= shape_[dim]);
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(begin * strides_[dim]) * dtype_size(dtype_);
  t.shape_[dim] = end - begin;
  return t;
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  if (dim0 < 0) dim0 += rank();
  if (dim1 < 0) dim1 += rank();
  MX_CHECK(dim0 >= 0 && dim0 < rank() && dim1 >= 0 && dim1 < rank());
  Tensor t = *this;
  std::swap(t.shape_[dim0], t.shape_[dim1]);
  std::swap(t.strides_[dim0], t.strides_[dim1]);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  MX_CHECK(is_contiguous());
  MX_CHECK(shape_numel(shape) == numel());
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view_as(DType dtype, Shape shape) const {
  MX_CHECK(is_contiguous());
  MX_CHECK(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype) == nbytes());
  Tensor t = *this;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::release_mapped_pages() const {
  if (!is_mapped() || !is_contiguous() || numel() <= 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data());
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + nbytes()) / page * page;
  // Pages shared with a neighbouring tensor stay; only advice, so a failure changes nothing.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

void Tensor::prefetch_mapped_pages() const {
  if (!is_mapped() || !is_contiguous() || numel() <= 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data());
  const uintptr_t first = begin / page * page;
  const uintptr_t last = (begin + nbytes() + page - 1) / page * page;
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_WILLNEED);
}

void Tensor::touch_mapped_pages() const {
  if (!is_mapped() || !is_contiguous() || numel() <= 0) return;
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const auto* p = static_cast<const volatile uint8_t*>(data());
  uint8_t sink = 0;
  for (size_t off = 0; off < nbytes(); off += page) sink ^= p[off];
  sink ^= p[nbytes() - 1];
  static_cast<void>(sink);
}

Tensor Tensor::contiguous_copy() const {
  Tensor out = empty(dtype_, shape_);
  const size_t esize = dtype_size(dtype_);
  const int64_t n = numel();
  auto* dst = static_cast<uint8_t*>(out.mutable_data());
  const auto* src = static_cast<const uint8_t*>(data());
  if (is_contiguous()) {
    std::memcpy(dst, src, static_cast<size_t>(n) * esize);
    return out;
  }
  Shape index(shape_.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < shape_.size(); ++d) off += index[d] * strides_[d];
    std::memcpy(dst + static_cast<size_t>(i) * esize, src + static_cast<size_t>(off) * esize,
                esize);
    for (size_t d = shape_.size(); d-- > 0;) {
      if (++index[d] < shape_[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_to_string(shape_);
}

}  // namespace mx
