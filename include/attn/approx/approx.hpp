// attn/approx/approx.hpp: approximate attention: top-r (value-oblivious) and value-aware sparse
// approximations, Carathéodory reduction, sliding window, LSH attention, random features as an
// evaluation-time replacement, and the Linformer module.
// Does not come with attn/attn.hpp (include this header); nothing here is needed to train.
#pragma once

#include "caratheodory.hpp"
#include "evaluation.hpp"
#include "linformer.hpp"
#include "lsh.hpp"
#include "sparse.hpp"
#include "value_aware.hpp"
