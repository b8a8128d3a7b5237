# SFT data end to end (tests/e2e/sft.sh): preprocess --sft's answer masks against spans worked out
# by hand (chat, ShareGPT, prompt/response), bad lines named file:line, train --sft counting cut
# samples, tp 2 and dp 2 against one rank, eval --sft against the saving run's validation loss;
# truncation as Megatron-Bridge (the field's tokens in the mask, answer targets counted by hand in
# train and eval --sft), --workers 2 and 3 byte for byte. 38 s at load 7 on 2 cores.
add_test(NAME e2e/sft COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sft.sh)
set_tests_properties(e2e/sft PROPERTIES TIMEOUT 120
  ENVIRONMENT "${TD_MPI_ENV};TRIDENT=$<TARGET_FILE:trident>")
# the unit test of tests/unit/test_sft.c (registered by tests/CMakeLists.txt's glob): under a second
set_tests_properties(unit/test_sft PROPERTIES TIMEOUT 15)
# Llama 3's own tokenizer and chat template (tests/e2e/sft_llama3.sh): its template refused by name,
# the answers' tokens of a template honouring add_generation_prompt decoded. Skipped (77) without
# the npm references of scripts/test-deps.sh. About 2 s.
add_test(NAME e2e/sft_llama3 COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sft_llama3.sh)
set_tests_properties(e2e/sft_llama3 PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 30
  ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>;BUILD=${CMAKE_BINARY_DIR}")
