// attn/io/io.hpp: the io layer in one include: atomic file writes, safetensors checkpoints, CSV
// logs. Does not add anything of its own; pulls in nlohmann/json (through safetensors.hpp).
#pragma once

#include "atomic_file.hpp"
#include "csv_log.hpp"
#include "safetensors.hpp"
