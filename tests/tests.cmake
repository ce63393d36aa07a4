# The unit tests: one executable per line (see attn_add_test in tests/CMakeLists.txt).
# RUN_HEAVY: optimised in the asan pass too (ATTN_RUN_HEAVY_FLAGS), where the rest is built at -O0;
# given to the programs whose run at -O0 takes about as long as, or longer than, compiling and
# running at -O1 (Zen 3: core 44 s run at -O0 against 20 s compile + 11 s run at -O1; attention 87
# against 100 + 11 and the online softmax 67 against 70 + 8 are close, and unoptimised their runs
# would lengthen the asan pass's wall-clock tail).
attn_add_test(core core/test_shape.cpp core/test_tensor.cpp core/test_rng.cpp core/test_gemm.cpp core/test_gemm_bf16.cpp core/test_fast_math.cpp core/test_float_env.cpp
              RUN_HEAVY)
attn_add_test(autodiff autodiff/test_expression.cpp autodiff/test_ops.cpp autodiff/test_tape.cpp
              autodiff/test_gradients.cpp autodiff/test_training.cpp)
# Alone: it replaces the global operator new to count allocations.
attn_add_test(autodiff_allocation autodiff/test_allocation.cpp)
# A program of its own: the path checks instantiate every (score, kernel, mask) combination, and
# one unity unit holding them and the other attention tests was the longest compile of the build.
# (Its three files are still one unity unit, the build's longest: about 200 CPU s under g++ -O2 on
# a Zen 3. With ATTN_UNITY_TESTS=OFF they are three units that compile in parallel, each parsing
# the headers and instantiating the shared fixture again.)
attn_add_test(attention_paths attention/test_paths_softmax.cpp attention/test_paths_polynomial.cpp
              attention/test_paths_feature_map.cpp)
attn_add_test(attention attention/test_attention_misc.cpp attention/test_identities.cpp attention/test_multi_head.cpp
              attention/test_non_finite.cpp
              attention/test_masks.cpp RUN_HEAVY)
attn_add_test(attention_torch_parity attention/test_torch_parity.cpp attention/test_kernel_features.cpp
              attention/test_rotary_hf.cpp
              attention/test_learned_bias.cpp DATA)
attn_add_test(optim optim/test_optimizers.cpp optim/test_schedules.cpp dist/test_shard.cpp DATA)
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
attn_add_test(nn nn/test_modules.cpp nn/test_gpt_training.cpp nn/test_llama_pieces.cpp DATA)
attn_add_test(data data/test_data.cpp data/test_birthplace.cpp DATA)
attn_add_test(data_bpe data/test_bpe.cpp DATA)  # byte-level BPE against data/bpe_reference
attn_add_test(io io/test_safetensors.cpp io/test_atomic_file.cpp io/test_csv_log.cpp io/test_hf.cpp
              DATA)
# The training layer (attn/train/): settings table, run lock, the loop, run files, programs
# without a shell, plots.
attn_add_test(train train/test_settings.cpp train/test_run_lock.cpp train/test_loop.cpp
              train/test_session.cpp train/test_trainer.cpp)
attn_add_test(learned_scores attention/test_learned_scores.cpp)
attn_add_test(teaching teaching/test_exercises.cpp teaching/test_models.cpp)
attn_add_test(approx approx/test_oracles.cpp approx/test_schemes.cpp)
attn_add_test(flash_block attention/test_flash_block.cpp RUN_HEAVY)
if(ATTN_CUDA)  # nvcc: tests/cuda/, suites cuda_host (runs anywhere) and cuda_device (needs a GPU)
  attn_add_cuda_test(cuda cuda/test_cuda.cu)
endif()
attn_add_test(attention_online_softmax attention/test_online_softmax.cpp RUN_HEAVY)
attn_add_test(analysis analysis/test_certified.cpp)
if(TARGET attn::hull)
  attn_add_test(analysis_hull analysis/test_hull.cpp LIBS attn::hull)
endif()
# Data-parallel training over MPI (attn::dist; CMake ATTN_MPI and an mpirun): test_dist as 1, 2
# and 3 ranks, and the failure tests (a stopped rank, a killed rank). Ranks talk over loopback
# only: Open MPI's ob1 messaging with the self, shared-memory (vader) and TCP transports, TCP and
# mpirun's own channel limited to `lo`. OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) lets mpirun run as root
# (CI containers); elsewhere it changes nothing. ASAN_OPTIONS=detect_leaks=0 matters only in the
# asan preset: Open MPI does not free its own allocations at MPI_Finalize (thousands of leak
# reports from libmpi, hwloc and its unloaded plugins, none from attn), so these tests check
# addresses and undefined behaviour there but not leaks; the shard code's leaks are checked by
# the optim and gpt_training tests, which do not use MPI.
if(TARGET attn::dist AND MPIEXEC_EXECUTABLE)
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _attn_mpirun_version
                  ERROR_QUIET)
  if(_attn_mpirun_version MATCHES "Open MPI|OpenRTE")
    set(ATTN_MPIRUN_LOOPBACK ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none --mca pml ob1
        --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
        CACHE INTERNAL "mpirun on loopback for the attn::dist tests")
    set(ATTN_MPIRUN_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
        ASAN_OPTIONS=detect_leaks=0
        CACHE INTERNAL "environment of the attn::dist tests")
    add_executable(test_dist dist/test_dist.cpp)
    target_link_libraries(test_dist PRIVATE attn::dist attn::compiled attn_warnings doctest::doctest)
    foreach(_n 1 2 3)
      add_test(NAME dist_${_n}_ranks COMMAND ${ATTN_MPIRUN_LOOPBACK} -np ${_n} $<TARGET_FILE:test_dist>)
      # One process slot per rank (ctest runs a test that asks for more than -j alone).
      set_tests_properties(dist_${_n}_ranks PROPERTIES TIMEOUT 180 LABELS dist PROCESSORS ${_n}
                           ENVIRONMENT "${ATTN_MPIRUN_ENV}")
    endforeach()
    # failure.sh <stop|kill> <seconds>: the job must end, non-zero, within that many seconds.
    foreach(_how stop kill)
      add_test(NAME dist_rank_${_how} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/failure.sh
               ${_how} 20 ${ATTN_MPIRUN_LOOPBACK} -np 2 $<TARGET_FILE:test_dist> --fail ${_how} 3)
      set_tests_properties(dist_rank_${_how} PROPERTIES TIMEOUT 60 LABELS dist PROCESSORS 2
                           ENVIRONMENT "${ATTN_MPIRUN_ENV}")
    endforeach()
    # char_gpt end to end (tests/dist/char_gpt.sh): 2 ranks = one process with 2 shards, resume
    # from a 2-rank checkpoint in one process, a killed and a stopped rank.
    if(ATTN_BUILD_EXAMPLES)
      add_test(NAME dist_char_gpt COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/char_gpt.sh
               $<TARGET_FILE:char_gpt> ${PROJECT_SOURCE_DIR}/data/tinyshakespeare.txt
               ${CMAKE_CURRENT_BINARY_DIR}/dist_char_gpt ${ATTN_MPIRUN_LOOPBACK})
      set_tests_properties(dist_char_gpt PROPERTIES TIMEOUT 180 LABELS dist PROCESSORS 2 COST 33
                           ENVIRONMENT "${ATTN_MPIRUN_ENV}")
    endif()
  else()
    message(STATUS "attn: the attn::dist tests need Open MPI's mpirun, not ${MPIEXEC_EXECUTABLE}")
  endif()
endif()

# The order ctest starts tests in a new build tree (one without the cost data ctest keeps in
# Testing/Temporary, as on a fresh CI clone): the costliest first, so that a long test does not
# start late and run alone at the end of a pass. COST: seconds in the pass where the test is
# slowest (Zen 3, ctest -j 2: the asan pass for these but data, whose 20 s are the ci pass's);
# later runs use ctest's own measurements.
set_tests_properties(attention_paths PROPERTIES COST 100)
set_tests_properties(flash_block PROPERTIES COST 64)
set_tests_properties(nn PROPERTIES COST 34)
set_tests_properties(teaching PROPERTIES COST 30)
set_tests_properties(data PROPERTIES COST 20)
set_tests_properties(autodiff analysis approx PROPERTIES COST 18)
