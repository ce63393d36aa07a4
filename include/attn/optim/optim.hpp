// attn/optim/optim.hpp: the optimizer layer in one include: SGD, Adam, AdamW, RAdam, learning-rate
// schedules, gradient-norm clipping. Does not include the trainer or checkpoint code (io/).
#pragma once

#include "adam.hpp"
#include "clip.hpp"
#include "param_group.hpp"
#include "schedule.hpp"
#include "sgd.hpp"
#include "step.hpp"
