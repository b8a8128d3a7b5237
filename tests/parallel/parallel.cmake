# Tests that run under mpirun. Each group size runs as its own ctest.

add_executable(test_comm ${CMAKE_CURRENT_LIST_DIR}/test_comm.c)
target_link_libraries(test_comm PRIVATE trident_floors)
target_include_directories(test_comm PRIVATE ${CMAKE_SOURCE_DIR}/src)
add_test(NAME parallel/comm_np1 COMMAND test_comm)
foreach(np 2 3 4)
  add_test(NAME parallel/comm_np${np} COMMAND ${TD_MPIRUN} -np ${np} $<TARGET_FILE:test_comm>)
endforeach()
set_tests_properties(parallel/comm_np1 parallel/comm_np2 parallel/comm_np3 parallel/comm_np4
  PROPERTIES ENVIRONMENT "${TD_MPI_ENV}" TIMEOUT 60)
# every float sum through the ring collectives (src/comm/ring.c), held to the ring's order of additions
foreach(np 3 4)
  add_test(NAME parallel/comm_np${np}_ring COMMAND ${TD_MPIRUN} -np ${np} $<TARGET_FILE:test_comm>)
  set_tests_properties(parallel/comm_np${np}_ring PROPERTIES ENVIRONMENT "${TD_MPI_ENV};TRIDENT_RING_MIN_BYTES=0" TIMEOUT 60)
endforeach()
# the MoE alltoall token dispatcher's messages: each peer's exact counts against a reference routing
add_executable(test_moe_a2a ${CMAKE_CURRENT_LIST_DIR}/test_moe_a2a.c)
target_link_libraries(test_moe_a2a PRIVATE trident_floors)
target_include_directories(test_moe_a2a PRIVATE ${CMAKE_SOURCE_DIR}/src)
add_test(NAME parallel/moe_a2a_np2 COMMAND ${TD_MPIRUN} -np 2 $<TARGET_FILE:test_moe_a2a>)
set_tests_properties(parallel/moe_a2a_np2 PROPERTIES ENVIRONMENT "${TD_MPI_ENV}" TIMEOUT 60)
