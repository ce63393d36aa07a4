// attn/analysis/analysis.hpp: the convex-hull analysis that needs only Eigen (certified vertex
// detection, its checker, the stolen-attention statistics); usable with attn::attn alone.
// Does not include hull.hpp, which needs Qhull (target attn::hull).
#pragma once

#include "certified.hpp"
#include "stolen.hpp"
