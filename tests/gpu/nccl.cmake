# NCCL as the communicator of device buffers (src/comm/nccl.c, docs/gpu.md "NCCL"): the twin of the
# world on device buffers, every call against the arithmetic worked in the test
# (tests/gpu/test_gpu_nccl.c). Exits 77, naming why, without CUDA in the build, a visible GPU or
# libnccl.so.2; refuses (exit 2) more ranks on a host than GPUs. A few seconds on a GPU (NCCL's
# start), milliseconds without. The host-side decisions are unit/test_comm_choice.
add_executable(test_gpu_nccl ${CMAKE_CURRENT_LIST_DIR}/test_gpu_nccl.c)
target_link_libraries(test_gpu_nccl PRIVATE trident_floors)
target_include_directories(test_gpu_nccl PRIVATE ${CMAKE_SOURCE_DIR}/src)
add_test(NAME gpu/nccl COMMAND test_gpu_nccl)
set_tests_properties(gpu/nccl PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 60)
