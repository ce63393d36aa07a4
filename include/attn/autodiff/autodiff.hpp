// attn/autodiff/autodiff.hpp: the whole autodiff layer: tape, Var, elementwise expressions and
// the primitive operations. Does not include attention or modules.
#pragma once

#include "check_gradient.hpp"
#include "expression.hpp"
#include "linalg.hpp"
#include "masked_softmax.hpp"
#include "nn_ops.hpp"
#include "pairwise.hpp"
#include "reduce.hpp"
#include "shape_ops.hpp"
#include "tape.hpp"
