# The CUDA backend's elementwise family (src/backend/cuda/{elementwise,norm,loss,optim}.cu)
# against the cpu backend, entry by entry, in fp32, bf16 and fp16 (tests/gpu/cuda_elementwise.c).
# Built with the CUDA backend (TRIDENT_HAVE_CUDA: -DTRIDENT_CUDA=AUTO found nvcc, or ON); it first checks
# that cuda_fill_elementwise fills exactly its entries, then exits 77 (skipped, the reason printed)
# when no GPU is visible. A few seconds on an H100.
if(TRIDENT_HAVE_CUDA)
  add_executable(test_cuda_elementwise ${CMAKE_CURRENT_LIST_DIR}/test_cuda_elementwise.c)
  target_link_libraries(test_cuda_elementwise PRIVATE trident_floors)
  # white-box: the backend's private headers (src/backend/backend.h, be_ops.h)
  target_include_directories(test_cuda_elementwise PRIVATE ${CMAKE_SOURCE_DIR}/src)
  add_test(NAME gpu/cuda_elementwise COMMAND test_cuda_elementwise)
  set_tests_properties(gpu/cuda_elementwise PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 60)
endif()
