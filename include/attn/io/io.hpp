// attn/io/io.hpp: the io layer in one include: atomic file writes, safetensors checkpoints, CSV
// logs. Does not add anything of its own; pulls in nlohmann/json through safetensors.hpp, except
// with the compiled part (ATTN_COMPILED), which parses JSON in attn::compiled.
#pragma once

#include "atomic_file.hpp"
#include "csv_log.hpp"
#include "safetensors.hpp"
