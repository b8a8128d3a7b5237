# The CUDA backend's attention and MoE entries against the CPU backend (src/backend/cuda/attention.cu,
# moe.cu; tests/gpu/test_cuda_attention_moe.c). Built in every build once the backend seam has
# be_backend_devices (src/backend/backend.h, the CUDA backend core); it exits 77 (skipped, the
# reason printed) where the binary has no cuda backend or no GPU is visible.
file(READ ${CMAKE_SOURCE_DIR}/src/backend/backend.h TD_BACKEND_H)
string(FIND "${TD_BACKEND_H}" "be_backend_devices" TD_HAS_BACKEND_DEVICES)
if(NOT TD_HAS_BACKEND_DEVICES EQUAL -1)
  add_executable(test_cuda_attention_moe ${CMAKE_CURRENT_LIST_DIR}/test_cuda_attention_moe.c)
  target_link_libraries(test_cuda_attention_moe PRIVATE trident_floors)
  target_include_directories(test_cuda_attention_moe PRIVATE ${CMAKE_SOURCE_DIR}/src)
  add_test(NAME gpu/cuda_attention_moe COMMAND test_cuda_attention_moe)
  # the CPU reference dominates: about a second on one core (the GPU part is milliseconds)
  set_tests_properties(gpu/cuda_attention_moe PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 60)
endif()
