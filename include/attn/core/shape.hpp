// attn/core/shape.hpp: the shape of a tensor (rank 0 to 4) and its row-major strides.
// Does not own data; Tensor does. Rank 0 is a scalar with one element.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <sstream>
#include <string>

#include "error.hpp"

namespace attn {

using index_t = std::int64_t;

class Shape {
 public:
  static constexpr int max_rank = 4;

  Shape() = default;  // rank 0: a scalar

  Shape(std::initializer_list<index_t> dims) {
    assign(std::span<const index_t>(dims.begin(), dims.size()));
  }

  explicit Shape(std::span<const index_t> dims) { assign(dims); }

  int rank() const { return rank_; }

  index_t operator[](int axis) const { return dims_[static_cast<std::size_t>(axis)]; }

  // Dimension along `axis`; negative axes count from the end (-1 is the last).
  index_t dim(int axis) const {
    return dims_[static_cast<std::size_t>(normalize_axis(axis, "Shape::dim"))];
  }

  index_t numel() const {
    index_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
    return n;
  }

  // Size of the last axis (1 for a scalar); the "row length" elementwise kernels iterate over.
  index_t last() const { return rank_ == 0 ? 1 : dims_[static_cast<std::size_t>(rank_ - 1)]; }

  // Row-major stride of `axis`: the product of the dimensions after it.
  index_t stride(int axis) const {
    index_t s = 1;
    for (int i = rank_ - 1; i > axis; --i) s *= dims_[static_cast<std::size_t>(i)];
    return s;
  }

  std::span<const index_t> dims() const { return {dims_.data(), static_cast<std::size_t>(rank_)}; }

  // Maps a possibly negative axis into [0, rank); throws value_error naming `op` otherwise.
  int normalize_axis(int axis, const char* op) const {
    const int a = axis < 0 ? axis + rank_ : axis;
    ATTN_CHECK(a >= 0 && a < rank_, value_error, op, ": axis ", axis, " out of range for shape ",
               *this);
    return a;
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[static_cast<std::size_t>(i)] != b.dims_[static_cast<std::size_t>(i)])
        return false;
    return true;
  }

  friend std::ostream& operator<<(std::ostream& os, const Shape& s) {
    os << '[';
    for (int i = 0; i < s.rank_; ++i) os << (i ? ", " : "") << s.dims_[static_cast<std::size_t>(i)];
    return os << ']';
  }

  std::string str() const {
    std::ostringstream os;
    os << *this;
    return os.str();
  }

 private:
  void assign(std::span<const index_t> dims) {
    ATTN_CHECK(dims.size() <= max_rank, shape_error, "Shape: rank ", dims.size(),
               " exceeds the maximum rank ", max_rank);
    rank_ = static_cast<int>(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) {
      ATTN_CHECK(dims[i] >= 0, shape_error, "Shape: negative dimension ", dims[i], " at axis ", i);
      dims_[i] = dims[i];
    }
    // Every product of dimensions (the element count, each stride) must be an index_t, even in
    // an empty shape: [2^32, 2^32] would wrap to 0 elements, [2^31, 2^31, 2^31] to a negative
    // count, and [0, 2^32, 2^32]'s first stride overflows. So the product of the non-zero
    // dimensions must fit.
    index_t n = 1;
    for (std::size_t i = 0; i < dims.size(); ++i)
      ATTN_CHECK(dims[i] == 0 || !__builtin_mul_overflow(n, dims[i], &n), shape_error,
                 "Shape: ", *this, " has dimensions whose product exceeds 2^63 - 1");
  }

  std::array<index_t, max_rank> dims_{};
  int rank_ = 0;
};

}  // namespace attn
