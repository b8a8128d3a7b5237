# The CUDA backend's attention and MoE entries against the CPU backend (src/backend/cuda/attention.cu,
# moe.cu; tests/gpu/test_cuda_attention_moe.c). Built with the CUDA backend (TRIDENT_HAVE_CUDA:
# -DTRIDENT_CUDA=AUTO found nvcc, or ON): it first checks that cuda_fill_attention_moe fills exactly
# its entries (no GPU needed), then exits 77 (skipped, the reason printed) when no GPU is visible.
if(TRIDENT_HAVE_CUDA)
  add_executable(test_cuda_attention_moe ${CMAKE_CURRENT_LIST_DIR}/test_cuda_attention_moe.c)
  target_link_libraries(test_cuda_attention_moe PRIVATE trident_floors)
  target_include_directories(test_cuda_attention_moe PRIVATE ${CMAKE_SOURCE_DIR}/src)
  add_test(NAME gpu/cuda_attention_moe COMMAND test_cuda_attention_moe)
  # the CPU reference dominates: about a second on one core (the GPU part is milliseconds)
  set_tests_properties(gpu/cuda_attention_moe PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 60)
endif()
