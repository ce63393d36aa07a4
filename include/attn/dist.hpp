// attn/dist.hpp: data-parallel training over MPI (link attn::dist): ranks, the parameter
// broadcast, the fixed-order gradient all-reduce and the batch sharding (dist/mpi.hpp,
// dist/shard.hpp). Does not come with attn/attn.hpp, which never needs MPI: include it on purpose.
// docs/distributed.md says how to run a trainer on several machines.
#pragma once

#include "dist/mpi.hpp"
#include "dist/shard.hpp"
