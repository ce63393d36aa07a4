// attn/nn/nn.hpp: the modules (layers, transformer blocks, GPT, AnyAttention, the encoder-decoder
// Transformer, GRUs) and text generation. Does not include optim/ or io/ (training loops and
// checkpoints are separate layers).
#pragma once

#include "any_attention.hpp"
#include "encoder_decoder.hpp"
#include "generate.hpp"
#include "layers.hpp"
#include "recurrent.hpp"
#include "transformer.hpp"
