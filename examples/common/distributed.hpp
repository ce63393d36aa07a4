// examples/common/distributed.hpp: the data-parallel job of an example trainer
// (attn::dist::DataParallel, attn/dist/data_parallel.hpp), joined before the command line is read
// (MPI may take arguments of its own out of argv).
// Does not train: the programs call DataParallel::step.
#pragma once

#include <attn/dist/data_parallel.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>

namespace examples {

// The job, or exit status 2 with a one-line error where its environment is wrong (an
// ATTN_DIST_TIMEOUT that is not a number of seconds): nothing has run yet.
inline std::unique_ptr<attn::dist::DataParallel> join_job(int& argc, char**& argv) {
  try {
    return std::make_unique<attn::dist::DataParallel>(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::exit(2);
  }
}

}  // namespace examples
