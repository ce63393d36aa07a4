// attn/core/tensor.hpp: Tensor<T>, an owning, contiguous, row-major array of rank 0 to 4, with
// Eigen::Map views of its 2-D blocks. Does not do arithmetic or autodiff (see autodiff/) and
// has no non-contiguous views: every Tensor owns its elements.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <ostream>
#include <span>
#include <type_traits>
#include <vector>

#include "error.hpp"
#include "rng.hpp"
#include "shape.hpp"

namespace attn {

namespace detail {

// Tensor storage is 64-byte aligned: one cache line, and the widest SIMD load (AVX-512).
inline constexpr std::size_t tensor_alignment = 64;

struct AlignedDelete {
  void operator()(void* p) const { ::operator delete (p, std::align_val_t{tensor_alignment}); }
};

}  // namespace detail

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatrixMap = Eigen::Map<RowMatrix<T>>;
template <class T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>>;
template <class T>
using VectorMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstVectorMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class T>
class Tensor {
  static_assert(std::is_arithmetic_v<T>, "attn: Tensor holds arithmetic element types only");

 public:
  using value_type = T;

  // An empty rank-1 tensor of shape [0].
  Tensor() : shape_{0} {}

  // A zero-filled tensor of the given shape: Tensor<float> t({2, 3});
  explicit Tensor(const Shape& shape) : Tensor(shape, T{0}) {}

  Tensor(const Shape& shape, T value) {
    resize(shape);
    fill(value);
  }

  // A tensor holding `values` in row-major order; their count must match the shape.
  Tensor(const Shape& shape, std::initializer_list<T> values)
      : Tensor(shape, std::span<const T>(values.begin(), values.size())) {}

  Tensor(const Shape& shape, std::span<const T> values) {
    ATTN_CHECK(static_cast<index_t>(values.size()) == shape.numel(), shape_error,
               "Tensor: ", values.size(), " values given for shape ", shape, " (", shape.numel(),
               " elements)");
    resize(shape);
    std::copy(values.begin(), values.end(), data_.get());
  }

  Tensor(const Tensor& other) : Tensor() { *this = other; }
  Tensor(Tensor&& other) noexcept { swap(other); }

  // Copy-assignment reuses this tensor's buffer when it is large enough.
  Tensor& operator=(const Tensor& other) {
    if (this != &other) {
      resize(other.shape_);
      if (numel() > 0)
        std::memcpy(data_.get(), other.data_.get(), static_cast<std::size_t>(numel()) * sizeof(T));
    }
    return *this;
  }

  Tensor& operator=(Tensor&& other) noexcept {
    swap(other);
    return *this;
  }

  void swap(Tensor& other) noexcept {
    std::swap(shape_, other.shape_);
    std::swap(data_, other.data_);
    std::swap(capacity_, other.capacity_);
  }

  // ---- factories ---------------------------------------------------------------------------

  static Tensor zeros(const Shape& shape) { return Tensor(shape, T{0}); }
  static Tensor ones(const Shape& shape) { return Tensor(shape, T{1}); }
  static Tensor full(const Shape& shape, T value) { return Tensor(shape, value); }

  // Samples from N(mean, stddev^2) drawn from `rng` in row-major order.
  static Tensor randn(const Shape& shape, Rng& rng, double mean = 0.0,
                      double stddev = 1.0) requires std::floating_point<T> {
    Tensor t;
    t.resize(shape);
    for (index_t i = 0; i < t.numel(); ++i) t.data_[i] = static_cast<T>(rng.normal(mean, stddev));
    return t;
  }

  // Samples from U[lo, hi) drawn from `rng` in row-major order.
  static Tensor uniform(const Shape& shape, Rng& rng, double lo = 0.0,
                        double hi = 1.0) requires std::floating_point<T> {
    Tensor t;
    t.resize(shape);
    for (index_t i = 0; i < t.numel(); ++i) t.data_[i] = static_cast<T>(rng.uniform(lo, hi));
    return t;
  }

  // ---- shape -------------------------------------------------------------------------------

  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  index_t numel() const { return shape_.numel(); }
  index_t dim(int axis) const { return shape_.dim(axis); }
  bool empty() const { return numel() == 0; }
  // Elements the buffer holds (>= numel(); resize() within it does not allocate).
  index_t capacity() const { return capacity_; }

  // Gives the tensor a new shape; keeps the buffer when it is large enough (no allocation), so
  // the contents are unspecified afterwards. Use reshape() to keep the elements.
  void resize(const Shape& shape) {
    const index_t n = shape.numel();
    if (n > capacity_) {
      ATTN_CHECK(static_cast<std::size_t>(n) <= std::numeric_limits<std::size_t>::max() / sizeof(T),
                 shape_error, "Tensor: ", shape, " holds ", n, " elements of ", sizeof(T),
                 " bytes, more bytes than an address space has");
      data_.reset(static_cast<T*>(::operator new (static_cast<std::size_t>(n) * sizeof(T),
                                                  std::align_val_t{detail::tensor_alignment})));
      capacity_ = n;
    }
    shape_ = shape;
  }

  // Reinterprets the same elements with another shape of the same element count.
  void reshape(const Shape& shape) {
    ATTN_CHECK(shape.numel() == numel(), shape_error, "reshape: cannot view ", shape_, " (",
               numel(), " elements) as ", shape, " (", shape.numel(), " elements)");
    shape_ = shape;
  }

  Tensor reshaped(const Shape& shape) const {
    Tensor t = *this;
    t.reshape(shape);
    return t;
  }

  // ---- elements ----------------------------------------------------------------------------

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::span<T> span() { return {data_.get(), static_cast<std::size_t>(numel())}; }
  std::span<const T> span() const { return {data_.get(), static_cast<std::size_t>(numel())}; }
  T* begin() { return data_.get(); }
  T* end() { return data_.get() + numel(); }
  const T* begin() const { return data_.get(); }
  const T* end() const { return data_.get() + numel(); }

  T& operator[](index_t flat) { return data_[flat]; }
  const T& operator[](index_t flat) const { return data_[flat]; }

  // Unchecked multi-index access, one index per axis: t(i, j).
  template <std::integral... I>
  T& operator()(I... idx) {
    return data_[offset(idx...)];
  }
  template <std::integral... I>
  const T& operator()(I... idx) const {
    return data_[offset(idx...)];
  }

  // Checked access: throws shape_error on a wrong index count and value_error out of range.
  template <std::integral... I>
  T& at(I... idx) {
    check_index(idx...);
    return data_[offset(idx...)];
  }
  template <std::integral... I>
  const T& at(I... idx) const {
    check_index(idx...);
    return data_[offset(idx...)];
  }

  void fill(T value) { std::fill(begin(), end(), value); }
  void zero() { fill(T{0}); }

  // ---- Eigen views -------------------------------------------------------------------------

  // All elements as one column array.
  VectorMap<T> array() { return VectorMap<T>(data(), numel()); }
  ConstVectorMap<T> array() const { return ConstVectorMap<T>(data(), numel()); }

  // A rank-2 tensor as a row-major matrix; a rank-1 tensor as a 1 x n row.
  MatrixMap<T> matrix() { return MatrixMap<T>(data(), rows2d("matrix"), shape_.last()); }
  ConstMatrixMap<T> matrix() const {
    return ConstMatrixMap<T>(data(), rows2d("matrix"), shape_.last());
  }

  // Slice b of a rank-3 tensor [B, M, N] as an M x N matrix.
  MatrixMap<T> matrix(index_t b) { return slice_map<MatrixMap<T>>(this->data(), b); }
  ConstMatrixMap<T> matrix(index_t b) const {
    return slice_map<ConstMatrixMap<T>>(this->data(), b);
  }

  // Slice (b, h) of a rank-4 tensor [B, H, M, N] as an M x N matrix.
  MatrixMap<T> matrix(index_t b, index_t h) { return slice_map<MatrixMap<T>>(this->data(), b, h); }
  ConstMatrixMap<T> matrix(index_t b, index_t h) const {
    return slice_map<ConstMatrixMap<T>>(this->data(), b, h);
  }

  // Every leading axis folded into the rows: [..., N] as a (numel / N) x N matrix.
  MatrixMap<T> rows() {
    return MatrixMap<T>(data(), numel() / std::max<index_t>(shape_.last(), 1), shape_.last());
  }
  ConstMatrixMap<T> rows() const {
    return ConstMatrixMap<T>(data(), numel() / std::max<index_t>(shape_.last(), 1), shape_.last());
  }

 private:
  template <class... I>
  index_t offset(I... idx) const {
    ATTN_ASSERT(static_cast<int>(sizeof...(I)) == rank());
    index_t off = 0;
    [[maybe_unused]] int axis = 0;
    ((off = off * shape_[axis++] + static_cast<index_t>(idx)), ...);
    return off;
  }

  template <class... I>
  void check_index(I... idx) const {
    ATTN_CHECK(static_cast<int>(sizeof...(I)) == rank(), shape_error, "Tensor::at: ", sizeof...(I),
               " indices for a tensor of shape ", shape_);
    [[maybe_unused]] int axis = 0;
    (
        [&](index_t i) {
          ATTN_CHECK(i >= 0 && i < shape_[axis], value_error, "Tensor::at: index ", i,
                     " out of range for axis ", axis, " of shape ", shape_);
          ++axis;
        }(static_cast<index_t>(idx)),
        ...);
  }

  index_t rows2d(const char* op) const {
    ATTN_CHECK(rank() == 1 || rank() == 2, shape_error, "Tensor::", op,
               ": needs rank 1 or 2, got shape ", shape_);
    return rank() == 1 ? 1 : shape_[0];
  }

  template <class Map, class Ptr, class... I>
  Map slice_map(Ptr base, I... idx) const {
    constexpr int r = static_cast<int>(sizeof...(I)) + 2;
    ATTN_CHECK(rank() == r, shape_error, "Tensor::matrix: ", sizeof...(I),
               " slice indices need rank ", r, ", got shape ", shape_);
    index_t off = 0;
    [[maybe_unused]] int axis = 0;
    (
        [&](index_t i) {
          ATTN_CHECK(i >= 0 && i < shape_[axis], value_error, "Tensor::matrix: index ", i,
                     " out of range for axis ", axis, " of shape ", shape_);
          off = off * shape_[axis] + i;
          ++axis;
        }(static_cast<index_t>(idx)),
        ...);
    const index_t m = shape_[r - 2], n = shape_[r - 1];
    return Map(base + off * m * n, m, n);
  }

  Shape shape_{index_t{0}};
  std::unique_ptr<T[], detail::AlignedDelete> data_;
  index_t capacity_ = 0;
};

// Largest |a_i - b_i| (NaN if any difference is NaN); throws shape_error when the shapes differ.
template <class T>
double max_abs_diff(const Tensor<T>& a, const Tensor<T>& b) {
  ATTN_CHECK(a.shape() == b.shape(), shape_error, "max_abs_diff: shapes differ: ", a.shape(),
             " vs ", b.shape());
  double m = 0.0;
  for (index_t i = 0; i < a.numel(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (std::isnan(d)) return d;  // a NaN anywhere is never "close"
    m = std::max(m, d);
  }
  return m;
}

// True when the shapes agree and |a_i - b_i| <= atol + rtol * |b_i| for every element (NaN fails).
template <class T>
bool allclose(const Tensor<T>& a, const Tensor<T>& b, double rtol = 1e-5, double atol = 1e-8) {
  if (a.shape() != b.shape()) return false;
  for (index_t i = 0; i < a.numel(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (!(std::abs(x - y) <= atol + rtol * std::abs(y))) return false;
  }
  return true;
}

// Converts element type (double <-> float for gradient checks, int -> float, ...).
template <class To, class From>
Tensor<To> cast(const Tensor<From>& t) {
  Tensor<To> out;
  out.resize(t.shape());
  for (index_t i = 0; i < t.numel(); ++i) out[i] = static_cast<To>(t[i]);
  return out;
}

// Prints "Tensor[2, 3]{1, 2, 3, 4, 5, 6}", eliding the middle of large tensors.
template <class T>
std::ostream& operator<<(std::ostream& os, const Tensor<T>& t) {
  os << "Tensor" << t.shape() << '{';
  const index_t n = t.numel();
  for (index_t i = 0; i < n; ++i) {
    if (n > 20 && i == 10) {
      os << ", ...";
      i = n - 10;
    }
    os << (i ? ", " : "") << +t[i];
  }
  return os << '}';
}

}  // namespace attn
