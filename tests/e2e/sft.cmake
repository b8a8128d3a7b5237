# SFT data end to end (tests/e2e/sft.sh): preprocess --sft's answer masks against spans worked out
# by hand (chat, ShareGPT, prompt/response), bad lines named file:line, train --sft counting cut
# samples, tp 2, dp 2, pp 2 and cp 2 against one rank, eval --sft against the saving run's validation loss.
# About 10 s on idle cores (53 s beside a 2-core training job).
add_test(NAME e2e/sft COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sft.sh)
set_tests_properties(e2e/sft PROPERTIES TIMEOUT 90
  ENVIRONMENT "${TD_MPI_ENV};TRIDENT=$<TARGET_FILE:trident>")
# the unit test of tests/unit/test_sft.c (registered by tests/CMakeLists.txt's glob): under a second
set_tests_properties(unit/test_sft PROPERTIES TIMEOUT 15)
# Llama 3's own tokenizer and chat template (tests/e2e/sft_llama3.sh): its template refused by name,
# the answers' tokens of a template honouring add_generation_prompt decoded. Skipped (77) without
# the npm references of scripts/test-deps.sh. About 2 s.
add_test(NAME e2e/sft_llama3 COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sft_llama3.sh)
set_tests_properties(e2e/sft_llama3 PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 30
  ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>;BUILD=${CMAKE_BINARY_DIR}")
