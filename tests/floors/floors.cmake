# The floors the build enforces (CMakeLists.txt, docs/architecture.md): an include or a call up a
# floor must fail, one to the same floor or below must not.
add_test(NAME build/floors COMMAND ${CMAKE_CURRENT_LIST_DIR}/floors.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
# The shape of the tree (scripts/include-cycles.py): no circle of #include "..." between files of
# src/ and include/, no .c or .h file there over 1,000 lines; the check first finds a planted
# cycle and a long file in a scratch tree, so it cannot pass by finding nothing.
add_test(NAME build/include_cycles COMMAND bash -c
  "python3 '${CMAKE_SOURCE_DIR}/scripts/include-cycles.py' --self-test && python3 '${CMAKE_SOURCE_DIR}/scripts/include-cycles.py' '${CMAKE_SOURCE_DIR}'")
set_tests_properties(build/include_cycles PROPERTIES TIMEOUT 20)
