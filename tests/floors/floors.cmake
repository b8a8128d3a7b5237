# The floors the build enforces (CMakeLists.txt, docs/architecture.md): an include or a call up a
# floor must fail, one to the same floor or below must not.
add_test(NAME build/floors COMMAND ${CMAKE_CURRENT_LIST_DIR}/floors.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
