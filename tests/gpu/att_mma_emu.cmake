# The tensor-core attention kernels (src/backend/cuda/att_mma.cuh) run on host threads against a
# double-precision attention written in the test (tests/gpu/test_att_mma_emu.cpp, with
# tests/gpu/cuemu.h emulating the warp: a context a lane, mma.m16n8k16 by PTX's fragment layout).
# It needs neither a GPU nor nvcc, so it runs in every build: the fragment layouts, masks and tiles
# are checked before a GPU runs them. About 1 s to run, 4 CPU-s to compile.
enable_language(CXX)
add_executable(test_att_mma_emu ${CMAKE_CURRENT_LIST_DIR}/test_att_mma_emu.cpp)
set_target_properties(test_att_mma_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
target_include_directories(test_att_mma_emu PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include/core
                           ${CMAKE_SOURCE_DIR}/include/backend)
target_compile_options(test_att_mma_emu PRIVATE -O1 -Wall -Wextra) # as fast as -O2 here, 0.4 CPU-s less to compile
add_test(NAME unit/att_mma_emu COMMAND test_att_mma_emu)
set_tests_properties(unit/att_mma_emu PROPERTIES TIMEOUT 30)
