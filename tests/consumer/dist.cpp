// Downstream program that links attn::dist from an installed attn (tests/consumer/CMakeLists.txt
// builds it when find_package found the component): includes attn/dist.hpp, starts MPI.
// Does not communicate; it is built, not run.
#include <attn/dist.hpp>

int main(int argc, char** argv) {
  attn::dist::Context world(argc, argv);
  return world.rank() < world.size() ? 0 : 1;
}
