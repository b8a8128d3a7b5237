# Chat templates end to end (tests/e2e/chat_template.sh): trident against @huggingface/jinja on
# every template and conversation, and the chat-template command's contract. Skipped (77) without
# node or the npm references of scripts/test-deps.sh.
add_test(NAME e2e/chat_template COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/chat_template.sh)
set_tests_properties(e2e/chat_template PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 30
  ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>;SRC=${CMAKE_SOURCE_DIR};BUILD=${CMAKE_BINARY_DIR}")
# the unit test of tests/unit/test_chat_template.c (registered by tests/CMakeLists.txt's glob):
# under a second, its hostile templates included
set_tests_properties(unit/test_chat_template PROPERTIES TIMEOUT 15)
