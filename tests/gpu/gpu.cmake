# Tests that need a GPU (docs/gpu.md; label gpu: `ctest -L gpu`, what scripts/gpu-check.sh runs on a
# GPU machine). Each exits 77, naming why, without CUDA in the build or without a visible GPU:
# ctest shows it skipped. The host-side parts of the CUDA backend are unit/test_cuda_host.
add_executable(test_gpu_backend ${CMAKE_CURRENT_LIST_DIR}/test_gpu_backend.c)
target_link_libraries(test_gpu_backend PRIVATE trident_floors)
target_include_directories(test_gpu_backend PRIVATE ${CMAKE_SOURCE_DIR}/src)
add_test(NAME gpu/backend COMMAND test_gpu_backend)
# COST: about 20 s on a GPU (the GEMM and bandwidth figures take most), so tests/CMakeLists.txt gives
# it 120 s; without a GPU it exits in milliseconds.
set_tests_properties(gpu/backend PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 COST 20)
