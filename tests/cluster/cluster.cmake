# Trident across emulated nodes (scripts/cluster.sh, docs/cluster.md). Needs root for the
# namespaces; without them the test is skipped (77), naming why.
add_test(NAME cluster/layouts COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/layouts.sh)
set_tests_properties(cluster/layouts PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED checkpoint_data
  ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>;DATA=${CMAKE_BINARY_DIR}/testtmp/checkpoint/ts_text_document;VOCAB=${TRIDENT_SHARED_DATA}/gpt2/vocab.json;MERGES=${TRIDENT_SHARED_DATA}/gpt2/merges.txt;WORK=${CMAKE_BINARY_DIR}/testtmp/cluster;COMPARE_RUNS=$<TARGET_FILE:compare_runs>;ROOT=${CMAKE_SOURCE_DIR}")
add_test(NAME cluster/slurm COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/slurm.sh)
set_tests_properties(cluster/slurm PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 COST 50 FIXTURES_REQUIRED checkpoint_data
  ENVIRONMENT "TRIDENT=$<TARGET_FILE:trident>;DATA=${CMAKE_BINARY_DIR}/testtmp/checkpoint/ts_text_document;VOCAB=${TRIDENT_SHARED_DATA}/gpt2/vocab.json;MERGES=${TRIDENT_SHARED_DATA}/gpt2/merges.txt;WORK=${CMAKE_BINARY_DIR}/testtmp/cluster-slurm;COMPARE_RUNS=$<TARGET_FILE:compare_runs>;ROOT=${CMAKE_SOURCE_DIR}")
