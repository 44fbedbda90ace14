// A tensor knows its dtype, shape and device, and owns (shares) a tagged allocation.
// Row-major, contiguous; views share storage (a row range, or a reshape).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/memory.h"

namespace moc {

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Storage {
  Storage(Allocator* a, std::size_t n, const MemTag& t) : alloc(a), bytes(n), tag(t), ptr(a->allocate(n, t)) {}
  ~Storage() { alloc->release(ptr, bytes, tag); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  Allocator* alloc;
  std::size_t bytes;
  MemTag tag;
  void* ptr;
};

using Shape = std::vector<std::int64_t>;
std::string shape_str(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(Allocator& alloc, DeviceKind dev, const Shape& shape, DType dt, const MemTag& tag);

  bool defined() const { return static_cast<bool>(storage_); }
  DType dtype() const { return dtype_; }
  DeviceKind device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const { return shape_.at(static_cast<std::size_t>(i < 0 ? rank() + i : i)); }
  std::int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_bytes(dtype_); }
  const MemTag& tag() const { return storage_->tag; }
  // Rows = product of all dims but the last; cols = last dim.
  std::int64_t rows() const {
    std::int64_t r = rank() ? 1 : 0;
    for (std::size_t i = 0; i + 1 < shape_.size(); ++i) r *= shape_[i];
    return r;
  }
  std::int64_t cols() const { return rank() ? shape_.back() : 0; }

  void* raw() const { return static_cast<char*>(storage_->ptr) + offset_bytes_; }
  template <class T> T* data() const { return static_cast<T*>(raw()); }

  // Same storage, new shape with the same number of elements.
  Tensor reshape(const Shape& s) const;
  // Rows [begin, end) of the first dimension (storage shared).
  Tensor slice0(std::int64_t begin, std::int64_t end) const;
  void reset() { storage_.reset(); }

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
  DeviceKind device_ = DeviceKind::cpu;
};

}  // namespace moc
