# Tests that run under mpirun. Each group size runs as its own ctest.

add_executable(test_comm ${CMAKE_CURRENT_LIST_DIR}/test_comm.c)
target_link_libraries(test_comm PRIVATE trident_floors)
target_include_directories(test_comm PRIVATE ${CMAKE_SOURCE_DIR}/src)
add_test(NAME parallel/comm_np1 COMMAND test_comm)
foreach(np 2 3 4)
  add_test(NAME parallel/comm_np${np} COMMAND ${TD_MPIRUN} -np ${np} $<TARGET_FILE:test_comm>)
endforeach()
set_tests_properties(parallel/comm_np1 parallel/comm_np2 parallel/comm_np3 parallel/comm_np4
  PROPERTIES ENVIRONMENT "${TD_MPI_ENV}")
# every float sum through the ring collectives (src/comm/ring.c), held to the ring's order of additions
foreach(np 3 4)
  add_test(NAME parallel/comm_np${np}_ring COMMAND ${TD_MPIRUN} -np ${np} $<TARGET_FILE:test_comm>)
  set_tests_properties(parallel/comm_np${np}_ring PROPERTIES ENVIRONMENT "${TD_MPI_ENV};TRIDENT_RING_MIN_BYTES=0")
endforeach()
# the MoE alltoall token dispatcher's messages: each peer's exact counts against a reference routing
add_executable(test_moe_a2a ${CMAKE_CURRENT_LIST_DIR}/test_moe_a2a.c)
target_link_libraries(test_moe_a2a PRIVATE trident_floors)
target_include_directories(test_moe_a2a PRIVATE ${CMAKE_SOURCE_DIR}/src)
add_test(NAME parallel/moe_a2a_np2 COMMAND ${TD_MPIRUN} -np 2 $<TARGET_FILE:test_moe_a2a>)
set_tests_properties(parallel/moe_a2a_np2 PROPERTIES ENVIRONMENT "${TD_MPI_ENV}")
# buffers that cross comm: direct (the cpu's rule: no staging copy) and staged through host memory
# (a device backend's: comm never handed backend memory), buckets started from queue events
add_executable(test_xfer ${CMAKE_CURRENT_LIST_DIR}/test_xfer.c)
target_link_libraries(test_xfer PRIVATE trident_floors)
target_include_directories(test_xfer PRIVATE ${CMAKE_SOURCE_DIR}/src)
add_test(NAME parallel/xfer_np2 COMMAND ${TD_MPIRUN} -np 2 $<TARGET_FILE:test_xfer>)
set_tests_properties(parallel/xfer_np2 PROPERTIES ENVIRONMENT "${TD_MPI_ENV}" TIMEOUT 60)
# A wait that times out while the other ranks still wait: the one line of the job, printed by the
# lowest rank that answered the roll call (rank 0 here), says whose wait it was; its [rank P]
# prefix and the rank the text says waited ("in world rank M") are the same rank, or the line
# says that it reports rank M's wait (tests/parallel/test_comm.c, --timeout-relay).
add_test(NAME parallel/comm_timeout_relay COMMAND bash -c
  "out=$(timeout 60 ${TD_MPIRUN_STR} -np 3 $<TARGET_FILE:test_comm> --timeout-relay 2>&1); rc=$?; \
   line=$(grep -m1 'no progress for' <<<\"$out\"); echo \"exit $rc: $line\"; \
   [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo 'FAIL: the job did not end on its own, non-zero'; echo \"$out\" | tail -5; exit 1; }; \
   p=$(grep -oE '^\\[rank [0-9]+\\]' <<<\"$line\" | grep -oE '[0-9]+'); m=$(grep -oE 'in world rank [0-9]+ on ' <<<\"$line\" | grep -oE '[0-9]+'); \
   [ -n \"$p\" ] && [ -n \"$m\" ] || { echo 'FAIL: no [rank P] line naming the waiting rank'; echo \"$out\" | tail -5; exit 1; }; \
   if [ \"$p\" != \"$m\" ] && ! grep -qE \": MPI_[A-Za-z]+ in world rank $m \\(whose wait it was; reported by this rank, the lowest that answered the roll call\\) failed: \" <<<\"$line\"; then \
     echo \"FAIL: [rank $p] prints world rank $m's wait as its own\"; exit 1; fi; \
   [ \"$p\" = 0 ] || { echo \"FAIL: rank $p printed, not rank 0 (the lowest that answered)\"; exit 1; }; echo ok")
set_tests_properties(parallel/comm_timeout_relay PROPERTIES ENVIRONMENT "${TD_MPI_ENV}")
