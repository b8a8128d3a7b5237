# Fuzz harnesses: every tests/fuzz/fuzz_<name>.c defines LLVMFuzzerTestOneInput.
#  - Always: fuzz_<name>_replay links it with replay_main.c, and the ctest fuzz/<name> runs every
#    seed in tests/fuzz/corpus/<name>/ through it (so `make test` and `make asan` exercise it); a
#    harness without seeds fails its test (it would test nothing).
#  - With -DTRIDENT_FUZZ=ON (clang; scripts/fuzz.sh): fuzz_<name> is a libFuzzer binary.
file(GLOB FUZZ_HARNESSES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/fuzz_*.c)
foreach(src ${FUZZ_HARNESSES})
  get_filename_component(target ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" name ${target})
  set(defs TD_TEST_DATA="${TRIDENT_SHARED_DATA}" TD_TEST_FIXTURES="${CMAKE_CURRENT_LIST_DIR}/../fixtures"
           TD_TEST_TMP="${CMAKE_BINARY_DIR}/testtmp")

  add_executable(${target}_replay ${src} ${CMAKE_CURRENT_LIST_DIR}/replay_main.c)
  target_link_libraries(${target}_replay PRIVATE trident_floors)
  target_include_directories(${target}_replay PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(${target}_replay PRIVATE ${defs})
  set(corpus ${CMAKE_CURRENT_LIST_DIR}/corpus/${name})
  add_test(NAME fuzz/${name} COMMAND ${target}_replay ${corpus}) # a missing folder fails the test
  set_tests_properties(fuzz/${name} PROPERTIES ENVIRONMENT "TMPDIR=${CMAKE_BINARY_DIR}/testtmp")

  if(TRIDENT_FUZZ)
    add_executable(${target} ${src})
    target_link_libraries(${target} PRIVATE trident_floors)
    target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/src)
    target_compile_definitions(${target} PRIVATE ${defs})
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  endif()
endforeach()

# The replay itself: an empty corpus must fail (it would pass having tested nothing).
add_test(NAME fuzz/replay_refuses_empty_corpus COMMAND bash -c
  "d=$(mktemp -d) || exit 1; $<TARGET_FILE:fuzz_bpe_replay> \"$d\"; rc=$?; rmdir \"$d\"; [ $rc -eq 1 ]")
set_tests_properties(fuzz/replay_refuses_empty_corpus PROPERTIES ENVIRONMENT "TMPDIR=${CMAKE_BINARY_DIR}/testtmp")
