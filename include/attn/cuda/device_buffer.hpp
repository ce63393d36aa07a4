// attn/cuda/device_buffer.hpp: GPU memory with RAII (DeviceBuffer<T>), a shaped GPU tensor
// (DeviceTensor<T>), and copies of attn::Tensor to and from the device, converting to bf16 when
// asked. Every CUDA call is checked (attn::cuda_error). Does not do arithmetic on the device, and
// copies synchronously (cudaMemcpy): a copy back waits for the kernels before it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "../core/bf16.hpp"
#include "../core/tensor.hpp"
#include "error.hpp"

namespace attn::cuda {

// n elements of T in GPU memory (uninitialised), freed when the buffer goes. Move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : size_(n) {
    if (n > 0) ATTN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  // A destructor cannot throw: cudaFree fails here only after an earlier (sticky) error that a
  // checked call has already reported, or while the runtime unloads at exit.
  ~DeviceBuffer() { release(); }

  // Frees now, checked (use this where a failure must be seen).
  void free() {
    if (data_) ATTN_CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    size_ = 0;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  void copy_from_host(const T* src, std::size_t n) {
    ATTN_CHECK(n == size_, shape_error, "DeviceBuffer::copy_from_host: ", n,
               " elements into a buffer of ", size_);
    if (n > 0) ATTN_CUDA_CHECK(cudaMemcpy(data_, src, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void copy_to_host(T* dst, std::size_t n) const {
    ATTN_CHECK(n == size_, shape_error, "DeviceBuffer::copy_to_host: ", n,
               " elements from a buffer of ", size_);
    if (n > 0) ATTN_CUDA_CHECK(cudaMemcpy(dst, data_, n * sizeof(T), cudaMemcpyDeviceToHost));
  }
  // Sets every byte to 0 (0.0f, +0 in bf16), ordered on `stream`.
  void zero(cudaStream_t stream = nullptr) {
    if (size_ > 0) ATTN_CUDA_CHECK(cudaMemsetAsync(data_, 0, size_ * sizeof(T), stream));
  }

 private:
  void release() noexcept {
    if (data_) static_cast<void>(cudaFree(data_));
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// A row-major tensor in GPU memory: a buffer and its shape.
template <class T>
class DeviceTensor {
 public:
  DeviceTensor() = default;
  explicit DeviceTensor(const Shape& shape)
      : buffer_(static_cast<std::size_t>(shape.numel())), shape_(shape) {}

  const Shape& shape() const { return shape_; }
  index_t numel() const { return shape_.numel(); }
  T* data() { return buffer_.data(); }
  const T* data() const { return buffer_.data(); }
  DeviceBuffer<T>& buffer() { return buffer_; }
  const DeviceBuffer<T>& buffer() const { return buffer_; }

  // Keeps the memory when the element count is unchanged (a new shape of the same size).
  void resize(const Shape& shape) {
    if (shape.numel() != shape_.numel())
      buffer_ = DeviceBuffer<T>(static_cast<std::size_t>(shape.numel()));
    shape_ = shape;
  }

 private:
  DeviceBuffer<T> buffer_;
  Shape shape_{0};
};

// Copies a host tensor to the device as T: float as is, bf16 rounded to nearest even.
template <class T = float>
DeviceTensor<T> to_device(const Tensor<float>& t) {
  DeviceTensor<T> d(t.shape());
  if constexpr (std::is_same_v<T, float>) {
    d.buffer().copy_from_host(t.data(), static_cast<std::size_t>(t.numel()));
  } else {
    std::vector<T> staged(static_cast<std::size_t>(t.numel()));
    for (index_t i = 0; i < t.numel(); ++i)
      staged[static_cast<std::size_t>(i)] = element_cast<T>(t[i]);
    d.buffer().copy_from_host(staged.data(), staged.size());
  }
  return d;
}

// Copies a device tensor back, widened to float (exact for bf16).
template <class T>
Tensor<float> to_host(const DeviceTensor<T>& d) {
  Tensor<float> t(d.shape());
  const auto n = static_cast<std::size_t>(d.numel());
  if constexpr (std::is_same_v<T, float>) {
    d.buffer().copy_to_host(t.data(), n);
  } else {
    std::vector<T> staged(n);
    d.buffer().copy_to_host(staged.data(), n);
    for (std::size_t i = 0; i < n; ++i) t[static_cast<index_t>(i)] = element_cast<float>(staged[i]);
  }
  return t;
}

}  // namespace attn::cuda
