// attn/attn.hpp: everything in attn that runs on the CPU (Eigen, nlohmann_json, OpenMP).
// Does not include analysis/hull.hpp (needs Qhull, target attn::hull) nor cuda/ (nvcc only).
#pragma once

#include "attention/multi_head.hpp"
#include "autodiff/autodiff.hpp"
#include "core/error.hpp"
#include "core/gemm.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "data/data.hpp"
#include "data/question_answer.hpp"
#include "io/checkpoint.hpp"
#include "io/io.hpp"
#include "nn/nn.hpp"
#include "optim/optim.hpp"
