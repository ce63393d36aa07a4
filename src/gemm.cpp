// src/gemm.cpp (attn::compiled): the float and double GEMMs compiled once, so that programs
// linking attn::compiled do not instantiate Eigen's GEMM kernels in every file that multiplies.
// Does not change what the products compute: the definitions are the headers', instantiated here.
#include <attn/core/gemm.hpp>

namespace attn {

ATTN_GEMM_INSTANTIATIONS(template, float)
ATTN_GEMM_INSTANTIATIONS(template, double)

}  // namespace attn
