// src/gemm.cpp (attn::compiled): the float and double GEMMs compiled once, so that programs
// linking attn::compiled do not instantiate Eigen's GEMM kernels in every file that multiplies.
// Does not change what the products compute: the definitions are the headers', instantiated here.
#include <attn/core/gemm.hpp>

namespace attn {

#define ATTN_INSTANTIATE_GEMM(T)                                                              \
  template void detail::strided_gemm<T>(const T*, bool, index_t, const T*, bool, index_t, T*, \
                                        index_t, index_t, index_t, index_t, bool);            \
  template void gemm<T>(const T*, bool, const T*, bool, T*, index_t, index_t, index_t, bool); \
  template void gemm_serial<T>(const T*, bool, const T*, bool, T*, index_t, index_t, index_t, bool);

ATTN_INSTANTIATE_GEMM(float)
ATTN_INSTANTIATE_GEMM(double)

#undef ATTN_INSTANTIATE_GEMM

}  // namespace attn
