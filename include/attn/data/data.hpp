// attn/data/data.hpp: tokenizers and batch samplers for the trainers.
// Does not read files (the examples do, with attn::io).
#pragma once

#include "char_tokenizer.hpp"
#include "text_batches.hpp"
