// src/attention.cpp (attn::compiled): the default attention (scaled dot, softmax, no mask or
// causal; float and double) on its fused and materialised paths, and the fused kernels of the dot
// family, the negative squared Euclidean and ALiBi scores (float), compiled once, so that programs
// linking attn::compiled do not instantiate the tile kernels and their backward in every file.
// Does not change what attention computes: the definitions are the headers', instantiated here.
#include <attn/attention/attention.hpp>

namespace attn {

ATTN_ATTENTION_INSTANTIATIONS(template)

}  // namespace attn
