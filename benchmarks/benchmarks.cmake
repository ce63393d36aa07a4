# The benchmark programs; attn_add_benchmark is defined in benchmarks/CMakeLists.txt.
attn_add_benchmark(autodiff autodiff.cpp)
attn_add_benchmark(attention attention.cpp)
find_package(CLI11 CONFIG REQUIRED)  # the command lines of bench_train_step, _generate, _hull
attn_add_benchmark(train_step train_step.cpp LIBS CLI11::CLI11)
attn_add_benchmark(generate generate.cpp LIBS CLI11::CLI11)
attn_add_benchmark(hf_generate hf_generate.cpp LIBS CLI11::CLI11)
attn_add_benchmark(approx approx.cpp)
attn_add_benchmark(checkpoint_load checkpoint_load.cpp)
attn_add_benchmark(bpe bpe.cpp LIBS CLI11::CLI11)  # with bpe_vs_hf.py: byte-level BPE vs tokenizers
if(ATTN_CUDA)  # nvcc; attn_add_cuda_executable is defined in cuda/CMakeLists.txt
  attn_add_cuda_executable(bench_cuda_attention cuda_attention.cu LIBS CLI11::CLI11)
endif()
if(TARGET attn::hull)
  attn_add_benchmark(hull hull.cpp LIBS attn::hull CLI11::CLI11)
endif()
if(TARGET attn::dist)  # needs MPI: run it alone and under mpirun (see its header)
  attn_add_benchmark(data_parallel data_parallel.cpp LIBS attn::dist)
endif()
