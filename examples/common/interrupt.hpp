// examples/common/interrupt.hpp: the trainers' StopRequest, which lives in the library's training
// layer now (attn/train/interrupt.hpp: SIGINT, SIGTERM and SIGHUP).
// Does not add anything to it.
#pragma once

#include <attn/train/interrupt.hpp>

namespace examples {
using attn::train::StopRequest;
}  // namespace examples
