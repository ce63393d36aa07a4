// attn/attn.hpp: what a model needs: core, autodiff, attention, nn and optim (Eigen, OpenMP).
// Does not include the opt-in layers, each one include away: io/io.hpp (checkpoints, logs; brings
// in nlohmann_json unless ATTN_COMPILED), data/data.hpp and data/question_answer.hpp (tokenizers,
// batches, span corruption, QA sets), approx/approx.hpp, analysis/ (hull.hpp needs Qhull, target
// attn::hull), cuda/ (nvcc only).
#pragma once

#include "attention/multi_head.hpp"
#include "autodiff/autodiff.hpp"
#include "core/error.hpp"
#include "core/gemm.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "nn/nn.hpp"
#include "optim/optim.hpp"
