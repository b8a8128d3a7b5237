# Trident across emulated nodes (scripts/cluster.sh, docs/cluster.md). Needs root for the
# namespaces; without them the tests are skipped (77), naming why. The e2e/checkpoint_data
# fixture's tinyshakespeare: in GPT-2's tokens (DATA, VOCAB, MERGES) where Slurm's clock is tuned
# to that model, else in bytes (BYTES_DATA, BYTES_TOKENIZER: a third of the CPU).
set(TD_CLUSTER_ENV "TRIDENT=$<TARGET_FILE:trident>;DATA=${CMAKE_BINARY_DIR}/testtmp/checkpoint/ts_text_document;VOCAB=${TRIDENT_SHARED_DATA}/gpt2/vocab.json;MERGES=${TRIDENT_SHARED_DATA}/gpt2/merges.txt;BYTES_DATA=${CMAKE_BINARY_DIR}/testtmp/checkpoint/bytes_text_document;BYTES_TOKENIZER=${CMAKE_BINARY_DIR}/testtmp/checkpoint/bytes.json;COMPARE_RUNS=$<TARGET_FILE:compare_runs>;ROOT=${CMAKE_SOURCE_DIR}")
# td_cluster_test(NAME COST SCRIPT ARGS...): WORK is testtmp/cluster-NAME
function(td_cluster_test name cost script)
  add_test(NAME cluster/${name} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/${script} ${ARGN})
  set_tests_properties(cluster/${name} PROPERTIES SKIP_RETURN_CODE 77 COST ${cost}
    FIXTURES_REQUIRED checkpoint_data ENVIRONMENT "${TD_CLUSTER_ENV};WORK=${CMAKE_BINARY_DIR}/testtmp/cluster-${name}")
endfunction()
td_cluster_test(layouts 15 layouts.sh)
td_cluster_test(dp_hier 12 dp_hier.sh)
td_cluster_test(cpus 3 cpus.sh)
td_cluster_test(disk 17 disk.sh)
# slurm.sh and faults.sh (kill, cut, loss, stop) side by side: mostly waiting, they share one slot
td_cluster_test(slurm_and_faults 60 waiting.sh)
td_cluster_test(plan_calibrate 20 plan_calibrate.sh)
# scripts/cluster.sh itself (no trident run, no data): `up` returns through a pipe, `up --owner`
# goes down with its owner however it ends, and the nodes see the paths under /tmp they are given
function(td_cluster_script_test name cost)
  add_test(NAME cluster/${name} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/${name}.sh)
  set_tests_properties(cluster/${name} PROPERTIES COST ${cost} SKIP_RETURN_CODE 77
    ENVIRONMENT "ROOT=${CMAKE_SOURCE_DIR};WORK=${CMAKE_BINARY_DIR}/testtmp/cluster-${name}")
endfunction()
td_cluster_script_test(pipe 3)
td_cluster_script_test(owner 5)
td_cluster_script_test(tmp_paths 3)
