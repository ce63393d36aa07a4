# The benchmark programs; attn_add_benchmark is defined in benchmarks/CMakeLists.txt.
attn_add_benchmark(autodiff autodiff.cpp)
attn_add_benchmark(attention attention.cpp)
attn_add_benchmark(train_step train_step.cpp)
attn_add_benchmark(generate generate.cpp)
if(TARGET attn::hull)
  attn_add_benchmark(hull hull.cpp LIBS attn::hull)
endif()
