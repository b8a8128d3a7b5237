# Checkpoints end to end (tests/e2e/checkpoint_*.sh, sharing checkpoint_lib.sh): exact resume,
# resharding, kills during saves, bad checkpoints, clean exits, Hugging Face conversion and
# `trident eval`. Each script prints one line per check and "N passed, M failed". They train
# the tiny model of the layout tests on a 1500-document tinyshakespeare dataset made here, in
# GPT-2's tokens (DATA) and, for the scripts that check no GPT-2 figure, in bytes (BYTES_DATA, the
# layout tests' byte-level tokenizer BYTES_TOKENIZER: a 512-row output layer rather than 50688
# makes a run a third of the CPU time).
set(CKPT_DIR ${CMAKE_BINARY_DIR}/testtmp/checkpoint)
add_test(NAME e2e/checkpoint_data COMMAND ${CMAKE_COMMAND} -E env bash -c
  "set -e; mkdir -p ${CKPT_DIR}; ${CMAKE_SOURCE_DIR}/scripts/text-to-jsonl.sh ${TRIDENT_SHARED_DATA}/tinyshakespeare.txt ${CKPT_DIR}/ts.jsonl 1500; \
   lines=$(wc -l <${CKPT_DIR}/ts.jsonl); [ $lines -eq 1500 ] || { echo \"text-to-jsonl.sh wrote $lines documents, asked for 1500\"; exit 1; }; \
   $<TARGET_FILE:trident> preprocess --input ${CKPT_DIR}/ts.jsonl --output-prefix ${CKPT_DIR}/ts --vocab-file ${TRIDENT_SHARED_DATA}/gpt2/vocab.json --merge-file ${TRIDENT_SHARED_DATA}/gpt2/merges.txt --append-eod; \
   python3 ${CMAKE_SOURCE_DIR}/tests/parallel/byte_tokenizer.py ${CKPT_DIR}/bytes.json; \
   $<TARGET_FILE:trident> preprocess --input ${CKPT_DIR}/ts.jsonl --output-prefix ${CKPT_DIR}/bytes --tokenizer-type HuggingFaceTokenizer --tokenizer-model ${CKPT_DIR}/bytes.json --append-eod")
set_tests_properties(e2e/checkpoint_data PROPERTIES FIXTURES_SETUP checkpoint_data)

foreach(name resume reshard crash errors exit convert eval disk find args signal distopt lock nonfinite cp)
  add_test(NAME e2e/checkpoint_${name} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/checkpoint_${name}.sh)
  set_tests_properties(e2e/checkpoint_${name} PROPERTIES FIXTURES_REQUIRED checkpoint_data
    ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>;DATA=${CKPT_DIR}/ts_text_document;VOCAB=${TRIDENT_SHARED_DATA}/gpt2/vocab.json;MERGES=${TRIDENT_SHARED_DATA}/gpt2/merges.txt;BYTES_DATA=${CKPT_DIR}/bytes_text_document;BYTES_TOKENIZER=${CKPT_DIR}/bytes.json;WORK=${CKPT_DIR}/${name};COMPARE_RUNS=$<TARGET_FILE:compare_runs>;${TD_MPI_ENV}")
endforeach()
# a NaN in a Hugging Face model refused on import; overflowing logits refused by generate and serve
# LoRA adapters in PEFT's format merged into a Hugging Face model (convert --merge-lora): the
# model and adapters written by hand in the test, every merged byte against a float64 merge there.
add_test(NAME e2e/lora_merge COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/lora_merge.py)
set_tests_properties(e2e/lora_merge PROPERTIES ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>" TIMEOUT 30)
# LoRA training (train --lora-rank): the refusals, the frozen base bitwise unchanged, only the
# adapters and their moments moving, exact resume with the settings from meta.json (1 and 4 ranks),
# the merged (--to hf) and PEFT (--to peft) exports scored as the LoRA model; 10 s
add_test(NAME e2e/lora_train COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/lora_train.sh)
set_tests_properties(e2e/lora_train PROPERTIES FIXTURES_REQUIRED checkpoint_data COST 10
  ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>;BYTES_DATA=${CKPT_DIR}/bytes_text_document;BYTES_TOKENIZER=${CKPT_DIR}/bytes.json;WORK=${CKPT_DIR}/lora_train;${TD_MPI_ENV}")
# A PEFT adapter loaded as trainable adapters (train --lora-load): the --to peft export loaded back
# trains as the LoRA checkpoint (1 and 4 ranks), a hand-written adapter placed exactly and scored as
# its merge, the refusals; 15 s
add_test(NAME e2e/lora_load COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/lora_load.sh)
set_tests_properties(e2e/lora_load PROPERTIES FIXTURES_REQUIRED checkpoint_data COST 10 TIMEOUT 120
  ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>;BYTES_DATA=${CKPT_DIR}/bytes_text_document;BYTES_TOKENIZER=${CKPT_DIR}/bytes.json;WORK=${CKPT_DIR}/lora_load;${TD_MPI_ENV}")
# LoRA on the experts of a Mixtral-shaped model (tests/e2e/lora_experts.sh): the base frozen, the
# merged and PEFT exports, --merge-lora, --lora-load over ep/tp/distopt, exact resume; Qwen2-MoE with the
# shared expert's adapters (exports, --merge-lora, --lora-load); 17 s
add_test(NAME e2e/lora_experts COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/lora_experts.sh)
set_tests_properties(e2e/lora_experts PROPERTIES FIXTURES_REQUIRED checkpoint_data COST 17 TIMEOUT 102
  ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>;BYTES_DATA=${CKPT_DIR}/bytes_text_document;BYTES_TOKENIZER=${CKPT_DIR}/bytes.json;WORK=${CKPT_DIR}/lora_experts;${TD_MPI_ENV}")

# Rope scaling (llama3, yarn, linear) held by the float64 reader (tests/e2e/rope_scaling.py): a tiny
# Hugging Face Llama with rope_scaling imported and scored by eval beyond its original context, the
# loss equal to the reader's; the export keeps rope_scaling; an unknown rope_type refused.
add_test(NAME e2e/rope_scaling COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/rope_scaling.py)
set_tests_properties(e2e/rope_scaling PROPERTIES TIMEOUT 60
  ENVIRONMENT "${TD_MPI_ENV};TRIDENT=$<TARGET_FILE:trident>;WORK=${CMAKE_BINARY_DIR}/testtmp/rope_scaling")
