# SFT data end to end (tests/e2e/sft.sh): preprocess --sft's answer masks against spans worked out
# by hand (chat, ShareGPT, prompt/response), bad lines named file:line, train --sft counting cut
# samples, tp 2, dp 2, pp 2 and cp 2 against one rank, eval --sft against the saving run's validation
# loss; truncation as Megatron-Bridge (the field's tokens in the mask, answer targets counted by hand
# in train and eval --sft), --workers 2 and 3 byte for byte. 38 s at load 7 on 2 cores.
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
# LoRA fine-tuning held by an independent float64 reader (tests/e2e/lora_reader.py, with
# llama_reader.py): a tiny Hugging Face Llama written by hand (untied and tied heads), imported,
# fine-tuned with LoRA on SFT chats; the merged export's loss and answer-only loss in the reader
# equal trident eval's and eval --sft's on the LoRA checkpoint, and the PEFT export applied to the
# base in float64 gives the merged export's logits. About 12 s beside other jobs.
add_test(NAME e2e/lora_reader COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/lora_reader.py)
set_tests_properties(e2e/lora_reader PROPERTIES TIMEOUT 90
  ENVIRONMENT "${TD_MPI_ENV};TRIDENT=$<TARGET_FILE:trident>;WORK=${CMAKE_BINARY_DIR}/testtmp/lora_reader")
# docs/finetune.md's user path (tests/e2e/finetune_doc.py): the page's command block run as it
# stands on a tiny Hugging Face model written here (import, preprocess --sft, eval --sft, LoRA
# training, PEFT export, merge, serve and a chat request, eval of the merged model).
add_test(NAME e2e/finetune_doc COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/finetune_doc.py)
set_tests_properties(e2e/finetune_doc PROPERTIES TIMEOUT 120
  ENVIRONMENT "${TD_MPI_ENV};TRIDENT=$<TARGET_FILE:trident>;SRC=${CMAKE_SOURCE_DIR};WORK=${CMAKE_BINARY_DIR}/testtmp/finetune_doc")
