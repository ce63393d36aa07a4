// src/safetensors.cpp (attn::compiled): the safetensors header parser (nlohmann_json's SAX
// parser and attn's validating handler) compiled once, so that programs reading or writing
// checkpoints do not compile nlohmann_json. Does not change what it accepts: the definition is
// the header's (attn/io/safetensors_json.hpp).
#include <attn/io/safetensors.hpp>
#include <attn/io/safetensors_json.hpp>
