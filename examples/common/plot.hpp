// examples/common/plot.hpp: the examples' figures, which live in the library's training layer now
// (attn/train/plot.hpp: SVG, PNG through gnuplot without a shell, terminal heatmaps).
// Does not add anything to them.
#pragma once

#include <attn/train/plot.hpp>

namespace plot = attn::train::plot;
