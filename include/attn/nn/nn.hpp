// attn/nn/nn.hpp: the modules (layers, transformer blocks, GPT) and text generation.
// Does not include optim/ or io/ (training loops and checkpoints are separate layers).
#pragma once

#include "generate.hpp"
#include "layers.hpp"
#include "transformer.hpp"
