# The unit tests: one executable per line (see attn_add_test in tests/CMakeLists.txt).
attn_add_test(core core/test_shape.cpp core/test_tensor.cpp core/test_rng.cpp core/test_gemm.cpp core/test_fast_math.cpp)
attn_add_test(autodiff autodiff/test_expression.cpp autodiff/test_ops.cpp autodiff/test_tape.cpp
              autodiff/test_gradients.cpp autodiff/test_training.cpp)
# Alone: it replaces the global operator new to count allocations.
attn_add_test(autodiff_allocation autodiff/test_allocation.cpp)
# Two programs, not one: the path checks instantiate every (score, kernel, mask) combination, and
# one unity unit holding them and the rest was the longest compile of the build.
attn_add_test(attention_paths attention/test_paths_softmax.cpp attention/test_paths_polynomial.cpp
              attention/test_paths_feature_map.cpp)
attn_add_test(attention attention/test_attention_misc.cpp attention/test_identities.cpp attention/test_multi_head.cpp
              attention/test_masks.cpp)
attn_add_test(attention_torch_parity attention/test_torch_parity.cpp DATA)
attn_add_test(optim optim/test_optimizers.cpp optim/test_schedules.cpp DATA)
# Programs that must not compile, each with the concept or static_assert it must trip.
attn_add_compile_fail_test(compile_fail_score_missing_alpha compile_fail/score_missing_alpha.cpp REGEX "ScorePolicy")
attn_add_compile_fail_test(compile_fail_mask_missing_tile compile_fail/mask_missing_tile.cpp REGEX "MaskPolicy")
attn_add_compile_fail_test(compile_fail_mask_composition_not_a_mask compile_fail/mask_composition_not_a_mask.cpp REGEX "MaskPolicy")
attn_add_compile_fail_test(compile_fail_kernel_not_a_policy compile_fail/kernel_not_a_policy.cpp REGEX "KernelPolicy")
attn_add_compile_fail_test(compile_fail_heads_zero compile_fail/heads_zero.cpp REGEX "attn: the head count must be positive")
attn_add_compile_fail_test(compile_fail_feature_map_needs_inner_product compile_fail/feature_map_needs_inner_product.cpp REGEX "attn: feature-map kernels need an inner-product score")
attn_add_compile_fail_test(compile_fail_pairwise_score_needs_softmax compile_fail/pairwise_score_needs_softmax.cpp REGEX "attn: pairwise and key-free scores")
attn_add_compile_fail_test(compile_fail_key_free_score_cross_attention compile_fail/key_free_score_cross_attention.cpp REGEX "attn: a key-free score \\(score::Synthesizer\\) has no keys")
attn_add_compile_fail_test(compile_fail_position_bias_needs_score_kernel compile_fail/position_bias_needs_score_kernel.cpp REGEX "attn: linear attention \\(a feature-map kernel\\) has no per-pair score")
attn_add_compile_fail_test(compile_fail_module_score_missing_transform compile_fail/module_score_missing_transform.cpp REGEX "MultiHeadScore")
# Positive controls: the same programs with their one defect fixed (-DATTN_COMPILE_FAIL_FIXED) compile.
foreach(_cf score_missing_alpha mask_missing_tile mask_composition_not_a_mask kernel_not_a_policy heads_zero
        feature_map_needs_inner_product pairwise_score_needs_softmax key_free_score_cross_attention
        position_bias_needs_score_kernel module_score_missing_transform)
  add_test(NAME compile_fail_control_${_cf} COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -fsyntax-only -DATTN_COMPILE_FAIL_FIXED
    "-I$<JOIN:$<TARGET_PROPERTY:attn,INTERFACE_INCLUDE_DIRECTORIES>;$<TARGET_PROPERTY:Eigen3::Eigen,INTERFACE_INCLUDE_DIRECTORIES>,;-I>"
    ${CMAKE_CURRENT_SOURCE_DIR}/compile_fail/${_cf}.cpp COMMAND_EXPAND_LISTS)
  set_tests_properties(compile_fail_control_${_cf} PROPERTIES TIMEOUT 300 LABELS compile_fail)
endforeach()
attn_add_test(nn nn/test_modules.cpp nn/test_gpt_training.cpp)
attn_add_test(data data/test_data.cpp data/test_birthplace.cpp DATA)
attn_add_test(io io/test_safetensors.cpp io/test_atomic_file.cpp io/test_csv_log.cpp DATA)
attn_add_test(learned_scores attention/test_learned_scores.cpp)
attn_add_test(teaching teaching/test_exercises.cpp teaching/test_models.cpp)
attn_add_test(approx approx/test_oracles.cpp approx/test_schemes.cpp)
attn_add_test(flash_block attention/test_flash_block.cpp)
if(ATTN_CUDA)  # nvcc: tests/cuda/, suites cuda_host (runs anywhere) and cuda_device (needs a GPU)
  attn_add_cuda_test(cuda cuda/test_cuda.cu)
endif()
attn_add_test(attention_online_softmax attention/test_online_softmax.cpp)
attn_add_test(analysis analysis/test_certified.cpp)
if(TARGET attn::hull)
  attn_add_test(analysis_hull analysis/test_hull.cpp LIBS attn::hull)
endif()
