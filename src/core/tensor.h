// Tensor: dtype, shape and strides (in elements) over shared storage. Storage either owns an
// aligned heap block or keeps a mapped checkpoint file alive, so a view into an mmap'ed
// weight costs no copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace mx {

// Where an owned buffer lives: the heap, or huge pages for large buffers written once and
// streamed for a model's life (core/huge_pages.h).
enum class Placement { kHeap, kHugePages };

class Storage {
 public:
  // 64-byte aligned, zero-filled.
  static std::shared_ptr<Storage> allocate(size_t bytes, Placement placement = Placement::kHeap);
  // Borrows `bytes` at `data` inside `file`, keeping the file mapped while the storage lives.
  static std::shared_ptr<Storage> view_of_file(std::shared_ptr<const MappedFile> file,
                                               const uint8_t* data, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  uint8_t* mutable_data() { return owned_ ? data_ : nullptr; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool is_owned() const { return owned_; }

 private:
  Storage() = default;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;
  Placement placement_ = Placement::kHeap;
  std::shared_ptr<const MappedFile> file_;
};

using Shape = std::vector<int64_t>;

std::string shape_to_string(const Shape& shape);
// Returns -1 when a dimension is negative or the product overflows int64.
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // A new contiguous, zero-filled tensor.
  static Tensor empty(DType dtype, Shape shape, Placement placement = Placement::kHeap);
  // A contiguous tensor over existing storage starting at byte `offset`.
  static Tensor from_storage(std::shared_ptr<Storage> storage, DType dtype, Shape shape,
                             size_t offset = 0);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return storage_ != nullptr; }
  bool is_contiguous() const;
  bool is_mapped() const { return storage_ && !storage_->is_owned(); }

  const void* data() const { return storage_->data() + offset_; }
  // Null for mapped (read-only) storage.
  void* mutable_data();
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(data());
  }
  template <typename T>
  T* mutable_data_as() {
    return static_cast<T*>(mutable_data());
  }

  // Views share storage. select(d, i) drops dimension d; slice keeps it; transpose swaps two.
  Tensor select(int dim, int64_t index) const;
  Tensor slice(int dim, int64_t begin, int64_t end) const;
  Tensor transpose(int dim0, int dim1) const;
  Tensor reshape(Shape shape) const;  // contiguous tensors only
  // The same bytes read as another dtype and shape (contiguous tensors, equal byte counts).
  Tensor view_as(DType dtype, Shape shape) const;
  // A contiguous owning copy (works for any strides).
  Tensor contiguous_copy() const;
  // For a mapped contiguous tensor whose bytes were copied or converted elsewhere: lets the
  // OS drop the resident file pages lying wholly inside them, so that a checkpoint is not held
  // twice. A later read faults them back from the file, so this is always safe. No effect on
  // owned storage.
  void release_mapped_pages() const;
  // For a mapped tensor read a few rows at a time (an embedding table): asks the OS to read
  // its file pages ahead, so that a row's first use is not a read from disk. Advice only.
  void prefetch_mapped_pages() const;
  // Reads one byte of every page of a mapped tensor, so that its file pages are resident when
  // this returns (read from disk now where the page cache dropped them). Nothing otherwise.
  void touch_mapped_pages() const;

  std::string describe() const;  // "BF16[4, 256]"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  DType dtype_ = DType::kF32;
  Shape shape_;
  Shape strides_;
};

}  // namespace mx
