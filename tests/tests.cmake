# The unit tests: one executable per line (see attn_add_test in tests/CMakeLists.txt).
attn_add_test(core core/test_shape.cpp core/test_tensor.cpp core/test_rng.cpp core/test_gemm.cpp)
attn_add_test(autodiff_ops autodiff/test_expression.cpp autodiff/test_ops.cpp autodiff/test_tape.cpp)
attn_add_test(autodiff_allocation autodiff/test_allocation.cpp)
attn_add_test(autodiff_gradients autodiff/test_gradients.cpp)
attn_add_test(autodiff_training autodiff/test_training.cpp)
