# The benchmark programs; attn_add_benchmark is defined in benchmarks/CMakeLists.txt.
attn_add_benchmark(autodiff autodiff.cpp)
attn_add_benchmark(attention attention.cpp)
attn_add_benchmark(train_step train_step.cpp)
attn_add_benchmark(generate generate.cpp)
attn_add_benchmark(approx approx.cpp)
if(ATTN_CUDA)  # nvcc; attn_add_cuda_executable is defined in cuda/CMakeLists.txt
  find_package(CLI11 CONFIG REQUIRED)
  attn_add_cuda_executable(bench_cuda_attention cuda_attention.cu LIBS CLI11::CLI11)
endif()
if(TARGET attn::hull)
  attn_add_benchmark(hull hull.cpp LIBS attn::hull)
endif()
