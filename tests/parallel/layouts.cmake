# The layout matrix: a tiny GPT with dropout on, trained for a few iterations in every layout,
# against the one-rank run with the same seed and global batch: per-iteration training and
# validation losses, grad norms and learning rates, and the final parameters (gathered) within
# 1e-5 relative; every replica of a parameter (data-parallel, tensor-parallel copies, the last
# stage's word embedding) bitwise equal to the dumped copy. The text is tokenized by bytes
# (byte_tokenizer.py: GPT-2's byte-level alphabet without merges, a Hugging Face tokenizer.json
# of 257 ids), so that the runs spend their time in the layers and the transfers rather than in
# a 50257-row output layer (the matrix took 208 CPU-seconds so, most of it that layer); the
# padded vocabulary is held at 512 in every layout (--make-vocab-size-divisible-by 512/tp), as
# the model must be the same, split over tp as any vocabulary.
# Validation runs every other iteration, and a stage's activations (seq 64 x hidden 64 x 4 bytes
# = 16 KiB a sample) are well above MPI's eager limit (4 KiB in shared memory), where a send
# completes only once its receive is posted: a schedule that waits on a send too early hangs
# here. One run lowers the eager limit to 512 bytes so the gradients and collectives cross it too.
add_executable(compare_runs ${CMAKE_CURRENT_LIST_DIR}/compare_runs.c)
target_link_libraries(compare_runs PRIVATE PkgConfig::CJSON m)

set(LAYOUT_DIR ${CMAKE_BINARY_DIR}/testtmp/layouts)
set(LAYOUT_DATA ${LAYOUT_DIR}/ts_text_document)
add_test(NAME parallel/layouts_data COMMAND ${CMAKE_COMMAND} -E env bash -c
  "set -e; mkdir -p ${LAYOUT_DIR}; ${CMAKE_SOURCE_DIR}/scripts/text-to-jsonl.sh ${TRIDENT_SHARED_DATA}/tinyshakespeare.txt ${LAYOUT_DIR}/ts.jsonl 1500; \
   $<TARGET_FILE:trident> preprocess --input ${LAYOUT_DIR}/ts.jsonl --output-prefix ${LAYOUT_DIR}/ts --vocab-file ${TRIDENT_SHARED_DATA}/gpt2/vocab.json --merge-file ${TRIDENT_SHARED_DATA}/gpt2/merges.txt --append-eod; \
   python3 ${CMAKE_CURRENT_LIST_DIR}/byte_tokenizer.py ${LAYOUT_DIR}/bytes.json; \
   $<TARGET_FILE:trident> preprocess --input ${LAYOUT_DIR}/ts.jsonl --output-prefix ${LAYOUT_DIR}/bytes --tokenizer-type HuggingFaceTokenizer --tokenizer-model ${LAYOUT_DIR}/bytes.json --append-eod")
set_tests_properties(parallel/layouts_data PROPERTIES FIXTURES_SETUP layouts_data)

# flags shared by every run; the global batch is 8 samples. Sequences of 32 x hidden 64: a stage
# transfer of one micro-batch is 8 KiB, a tp rank's half of it with scatter/gather (and a sequence-
# parallel slice at tp 2) 4 KiB, so the payloads are above Open MPI's 4 KiB shared-memory eager
# limit less its header, and go by rendezvous, where some deadlocks only appear; the eager512 rows
# lower the limit to 512 bytes for every message. (Seq 64 cost a third more CPU.)
set(LAYOUT_TRAIN --data-path ${LAYOUT_DIR}/bytes_text_document --tokenizer-type HuggingFaceTokenizer
  --tokenizer-model ${LAYOUT_DIR}/bytes.json --split 90,10,0
  --num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
  --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --train-iters 4 --lr 1e-3
  --min-lr 1e-4 --lr-warmup-iters 1 --lr-decay-style cosine --eval-interval 2 --eval-iters 1
  --clip-grad 1.0 --seed 7 --peak-tflops 1 --log-interval 100 --distributed-timeout-minutes 2)

# trident_layout(name np tp mbs [ENV k=v...] flags...): compared with the run LAYOUT_REF (default
# LAYOUT_BASE) within LAYOUT_TOL (default 1e-5; 0: bitwise). Every run is a fixture its
# comparisons pull in. With the default tolerance, a base run is made twice, the second time on
# the baseline build of the CPU kernels (other rounding everywhere): the difference is the float
# noise of that model's training, and a key whose noise is above a tenth of the tolerance gets
# ten times its noise instead (compare_runs.c says why the grad norm of the Llama runs needs it).
# With LAYOUT_NEEDS set (a file made by scripts/test-deps.sh), a run without that file prints why
# and exits 77: skipped, as the tests of the other downloaded references.
#
# The runs are made in batches (layout_batch.c): every run of one world size, environment and
# LAYOUT_NEEDS is a line of one batch, trained one after the other in one MPI job
# (parallel/layout_batch_KEY), which pays the processes' and MPI's start-up once (about half of
# a run's CPU time on 2 cores: the matrix took 196 CPU-seconds as a job a run). The test
# parallel/layout_NAME holds the run: its log, its replica line and its comparison.
set(LAYOUT_BATCH_DIR ${CMAKE_BINARY_DIR}/tests/layout_batches)
file(REMOVE_RECURSE ${LAYOUT_BATCH_DIR})
file(MAKE_DIRECTORY ${LAYOUT_BATCH_DIR})
set_property(GLOBAL PROPERTY LAYOUT_BATCH_KEYS "")
# layout_batch_add(name out np env need data_fixture cmd...): the run as a line of its batch; sets
# batch_key in the caller
function(layout_batch_add name out np env need data_fixture)
  set(key np${np})
  if(env OR need)
    string(MD5 h "${env}|${need}")
    string(SUBSTRING ${h} 0 6 h)
    set(key ${key}_${h})
  endif()
  # at most 12 runs a batch: a batch is one ctest test, and shorter ones pack better on 2 cores
  get_property(count GLOBAL PROPERTY LAYOUT_BATCH_COUNT_${key})
  if(NOT count)
    set(count 0)
  endif()
  math(EXPR part "${count} / 12 + 1")
  math(EXPR count "${count} + 1")
  set_property(GLOBAL PROPERTY LAYOUT_BATCH_COUNT_${key} ${count})
  if(part GREATER 1)
    set(key ${key}_${part})
  endif()
  string(JOIN "\t" line ${out}.log ${ARGN})
  file(APPEND ${LAYOUT_BATCH_DIR}/${key}.txt "${line}\n")
  get_property(keys GLOBAL PROPERTY LAYOUT_BATCH_KEYS)
  if(NOT key IN_LIST keys)
    set_property(GLOBAL APPEND PROPERTY LAYOUT_BATCH_KEYS ${key})
    set_property(GLOBAL PROPERTY LAYOUT_BATCH_${key}_NP ${np})
    set_property(GLOBAL PROPERTY LAYOUT_BATCH_${key}_ENV "${env}")
    set_property(GLOBAL PROPERTY LAYOUT_BATCH_${key}_NEED "${need}")
  endif()
  set_property(GLOBAL APPEND PROPERTY LAYOUT_BATCH_${key}_OUTS ${out})
  set_property(GLOBAL APPEND PROPERTY LAYOUT_BATCH_${key}_DATA ${data_fixture})
  set(batch_key ${key} PARENT_SCOPE)
endfunction()

function(trident_layout name np tp mbs)
  set(ref ${LAYOUT_BASE})
  if(DEFINED LAYOUT_REF)
    set(ref ${LAYOUT_REF})
  endif()
  set(tol 1e-5)
  if(DEFINED LAYOUT_TOL)
    set(tol ${LAYOUT_TOL})
  endif()
  set(data_fixture layouts_data)
  if(DEFINED LAYOUT_DATA_FIXTURE)
    set(data_fixture ${LAYOUT_DATA_FIXTURE})
  endif()
  set(env "")
  if(ARGN AND "${ARGV4}" STREQUAL "ENV")
    list(POP_FRONT ARGN _)
    set(first "")
    if(ARGN)
      list(GET ARGN 0 first)
    endif()
    while(first MATCHES "^[A-Za-z_]+=")
      list(POP_FRONT ARGN first)
      list(APPEND env ${first})
      set(first "")
      if(ARGN)
        list(GET ARGN 0 first)
      endif()
    endwhile()
  endif()
  set(out ${LAYOUT_DIR}/${name})
  set(need "")
  if(DEFINED LAYOUT_NEEDS)
    set(need "${LAYOUT_NEEDS_CHECK} ")
  endif()
  math(EXPR div "512 / ${tp}")
  set(args ${LAYOUT_TRAIN} --tensor-model-parallel-size ${tp} --make-vocab-size-divisible-by ${div}
    --micro-batch-size ${mbs})
  # the noise run of a base, where the baseline kernels differ from the best (x86-64 ISA builds)
  set(noisy OFF)
  if(NOT DEFINED LAYOUT_TOL AND "avx2" IN_LIST TD_KERNEL_ISAS)
    set(noisy ON)
  endif()
  # a run's own test: its batch ended (a log of its own, the metrics written)
  set(ran "${need}[ -s ${out}.jsonl ] || { echo 'no metrics from this run (${out}.jsonl): its batch failed or did not run it'; cat ${out}.log 2>/dev/null | tail -20; exit 1; }")
  layout_batch_add(${name} ${out} ${np} "${env}" "${need}" ${data_fixture} ${args}
    --metrics-file ${out}.jsonl --dump-params ${out}.params ${ARGN} ${LAYOUT_ARCH})
  if(name STREQUAL "${LAYOUT_BASE}")
    add_test(NAME parallel/layout_${name} COMMAND bash -c "${ran}")
    set_tests_properties(parallel/layout_${name} PROPERTIES FIXTURES_SETUP layouts_${name}
      FIXTURES_REQUIRED layouts_batch_${batch_key})
    if(noisy)
      set(nenv ${env} TRIDENT_CPU_ISA=baseline)
      layout_batch_add(${name}_noise ${out}_noise ${np} "${nenv}" "${need}" ${data_fixture} ${args}
        --metrics-file ${out}_noise.jsonl ${ARGN} ${LAYOUT_ARCH})
      add_test(NAME parallel/layout_${name}_noise COMMAND bash -c
        "${need}[ -s ${out}_noise.jsonl ] || { echo 'no metrics from this run: its batch failed or did not run it'; tail -20 ${out}_noise.log; exit 1; }")
      set_tests_properties(parallel/layout_${name}_noise PROPERTIES FIXTURES_SETUP layouts_${name}_noise
        FIXTURES_REQUIRED layouts_batch_${batch_key})
      if(need)
        set_tests_properties(parallel/layout_${name}_noise PROPERTIES SKIP_RETURN_CODE 77)
      endif()
    endif()
  else()
    set(noise "")
    set(fixtures "layouts_batch_${batch_key};layouts_${ref}")
    if(noisy AND ref STREQUAL "${LAYOUT_BASE}")
      set(noise ${LAYOUT_DIR}/${ref}_noise.jsonl)
      list(APPEND fixtures layouts_${ref}_noise)
    endif()
    add_test(NAME parallel/layout_${name} COMMAND bash -c
      "${ran}; grep -q 'every replica is bitwise the same' ${out}.log || { echo 'no replica check in the log'; exit 1; }; \
       $<TARGET_FILE:compare_runs> ${LAYOUT_DIR}/${ref}.jsonl ${out}.jsonl ${LAYOUT_DIR}/${ref}.params ${out}.params ${tol} ${noise}")
    set_tests_properties(parallel/layout_${name} PROPERTIES FIXTURES_SETUP layouts_${name}
      FIXTURES_REQUIRED "${fixtures}")
  endif()
  if(need)
    set_tests_properties(parallel/layout_${name} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endfunction()

# The batches' tests, once every run is listed (at the end of this file): each removes its runs'
# metrics and logs (a metrics file is appended to), then trains them in one MPI job. COST: about
# 0.6 s a run at 1-2 ranks, 1 at 4 and 2.2 at 8 on 2 cores beside the rest of the suite.
add_executable(layout_batch ${CMAKE_CURRENT_LIST_DIR}/layout_batch.c)
target_link_libraries(layout_batch PRIVATE trident_floors)
target_include_directories(layout_batch PRIVATE ${CMAKE_SOURCE_DIR}/src)
function(trident_layout_batches)
  get_property(keys GLOBAL PROPERTY LAYOUT_BATCH_KEYS)
  foreach(key ${keys})
    get_property(np GLOBAL PROPERTY LAYOUT_BATCH_${key}_NP)
    get_property(env GLOBAL PROPERTY LAYOUT_BATCH_${key}_ENV)
    get_property(need GLOBAL PROPERTY LAYOUT_BATCH_${key}_NEED)
    get_property(outs GLOBAL PROPERTY LAYOUT_BATCH_${key}_OUTS)
    get_property(data GLOBAL PROPERTY LAYOUT_BATCH_${key}_DATA)
    list(REMOVE_DUPLICATES data)
    list(LENGTH outs n)
    set(files "")
    foreach(o ${outs})
      list(APPEND files ${o}.jsonl ${o}.log)
    endforeach()
    string(JOIN " " files ${files})
    set(list ${LAYOUT_BATCH_DIR}/${key}.txt)
    add_test(NAME parallel/layout_batch_${key} COMMAND bash -c
      "${need}rm -f ${files} && ${TD_MPIRUN_STR} -np ${np} $<TARGET_FILE:layout_batch> ${list}")
    # COST in tenths of a second a run; its limit in seconds a run: the one a run had as a test of
    # its own (60 s) is far more than a run needs, but twelve runs at 6 x COST left too little
    # under make asan's or a loaded machine's slowness
    if(np GREATER_EQUAL 8)
      set(tenths 22)
      set(per 45)
    elseif(np GREATER_EQUAL 4)
      set(tenths 10)
      set(per 25)
    else()
      set(tenths 6)
      set(per 15)
    endif()
    math(EXPR cost "${n} * ${tenths} / 10 + 1")
    math(EXPR limit "${n} * ${per}")
    set_tests_properties(parallel/layout_batch_${key} PROPERTIES FIXTURES_SETUP layouts_batch_${key}
      FIXTURES_REQUIRED "${data}" ENVIRONMENT "${TD_MPI_ENV};${env}" COST ${cost} TIMEOUT ${limit})
    if(need)
      set_tests_properties(parallel/layout_batch_${key} PROPERTIES SKIP_RETURN_CODE 77)
    endif()
    # two 8-rank jobs at once under make asan (1.6 GB a rank) ran the 24 GiB machine out of memory
    if(np GREATER_EQUAL 8)
      set_tests_properties(parallel/layout_batch_${key} PROPERTIES RESOURCE_LOCK eight_ranks)
    endif()
  endforeach()
endfunction()

set(LAYOUT_ARCH "")
set(LAYOUT_BASE baseline)
trident_layout(baseline 1 1 2)
trident_layout(mbs1 1 1 1)
trident_layout(tp2 2 2 2)
trident_layout(tp4 4 4 2)
trident_layout(pp2_1f1b 2 1 1 --pipeline-model-parallel-size 2)
trident_layout(pp4_1f1b 4 1 1 --pipeline-model-parallel-size 4)
trident_layout(pp2_gpipe 2 1 2 --pipeline-model-parallel-size 2 --pipeline-schedule gpipe)
trident_layout(pp2_vp2 2 1 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1)
trident_layout(dp2 2 1 2)
trident_layout(dp4 4 1 1)
trident_layout(dp2_overlap 2 1 1 --overlap-grad-reduce --ddp-bucket-size 5000)
trident_layout(tp2_pp2_dp2 8 2 1 --pipeline-model-parallel-size 2)
trident_layout(tp2_pp2_vp2 4 2 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1)
trident_layout(tp2_pp2 4 2 2 --pipeline-model-parallel-size 2)
# Scatter/gather (on by default with tp > 1 and no sequence parallelism): each tp rank sends 1/tp
# of a stage transfer and the receivers all-gather it. It moves the same floats, so the runs
# without it are bitwise those with it (tolerance 0): 1F1B and interleaved, with validation
# (the forward-only schedule) every other iteration; the runs with it are held against the one-
# rank run above. The log names which applies (parallel/layout_scatter_gather_log).
set(LAYOUT_TOL 0)
set(LAYOUT_REF tp2_pp2)
trident_layout(tp2_pp2_nosg 4 2 2 --pipeline-model-parallel-size 2 --no-scatter-gather-tensors-in-pipeline)
set(LAYOUT_REF tp2_pp2_vp2)
trident_layout(tp2_pp2_vp2_nosg 4 2 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
  --no-scatter-gather-tensors-in-pipeline)
unset(LAYOUT_REF)
unset(LAYOUT_TOL)
trident_layout(pp2_uneven 2 1 1 --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 3)
trident_layout(pp4_uneven 4 1 2 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 1
  --decoder-last-pipeline-num-layers 1)
trident_layout(pp2_head_only 2 1 1 --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 0)
trident_layout(pp4_embedding_only 4 1 1 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 0
  --decoder-last-pipeline-num-layers 2)
# Megatron's accounting: 8 layers + the embedding + the loss = 10 over pp 2, 5 a stage, so the
# split is 0-3 | 4-7; the embedding alone over pp 3 (0-1 | 2-4 | 5-7); interleaved, 10 virtual
# stages of one: the first only the embedding, the last only the loss
trident_layout(pp2_account_both 2 1 1 --pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split
  --account-for-loss-in-pipeline-split)
trident_layout(pp3_account_embedding 3 1 1 --pipeline-model-parallel-size 3 --account-for-embedding-in-pipeline-split)
trident_layout(pp2_vp5_account_both 2 1 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split)
trident_layout(pp4_vp2 4 1 1 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1)
trident_layout(pp2_vp2_dp2_eager512 4 1 1 ENV "OMPI_MCA_btl_vader_eager_limit=512;OMPI_MCA_btl_vader_rndv_eager_limit=512"
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2)
trident_layout(tp2_pp2_eager512 4 2 2 ENV "OMPI_MCA_btl_vader_eager_limit=512;OMPI_MCA_btl_vader_rndv_eager_limit=512"
  --pipeline-model-parallel-size 2 --overlap-grad-reduce)
# The distributed optimizer (ZeRO-1): reduce-scatter, a shard of Adam per dp rank, all-gather;
# several buckets (--ddp-bucket-size) with both overlaps; the tied embedding split over stages.
# sequence parallelism: norms, dropout and residuals on s/t of each sample, the stage transfers
# 1/t the size, dropout masks those of the one-rank run
trident_layout(sp_tp2 2 2 2 --sequence-parallel)
trident_layout(sp_tp4 4 4 1 --sequence-parallel)
trident_layout(sp_tp2_pp2_vp2 4 2 1 --sequence-parallel --pipeline-model-parallel-size 2
  --num-layers-per-virtual-pipeline-stage 2)
add_test(NAME parallel/layout_scatter_gather_log COMMAND bash -c
  "grep -q 'scatter/gather on: each of the 2 tp ranks sends 1/2' ${LAYOUT_DIR}/tp2_pp2.log && \
   grep -q 'scatter/gather off (--no-scatter-gather-tensors-in-pipeline)' ${LAYOUT_DIR}/tp2_pp2_nosg.log && \
   grep -q 'scatter/gather not needed: under --sequence-parallel' ${LAYOUT_DIR}/sp_tp2_pp2_vp2.log && \
   grep -q 'scatter/gather off: one tensor-parallel rank' ${LAYOUT_DIR}/pp2_1f1b.log || \
   { grep -H 'pipeline transfers' ${LAYOUT_DIR}/tp2_pp2.log ${LAYOUT_DIR}/tp2_pp2_nosg.log ${LAYOUT_DIR}/sp_tp2_pp2_vp2.log ${LAYOUT_DIR}/pp2_1f1b.log; exit 1; }")
set_tests_properties(parallel/layout_scatter_gather_log PROPERTIES
  FIXTURES_REQUIRED "layouts_tp2_pp2;layouts_tp2_pp2_nosg;layouts_sp_tp2_pp2_vp2;layouts_pp2_1f1b")
# everything at once (issue 11): tp 2 x pp 2 x dp 2, sequence parallel, distributed optimizer
# with both overlaps, full recomputation
trident_layout(sp_distopt_rc_tp2_pp2_dp2 8 2 1 --sequence-parallel --pipeline-model-parallel-size 2
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 2)
trident_layout(distopt_dp2 2 1 2 --use-distributed-optimizer)
trident_layout(distopt_dp4_overlap 4 1 1 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
  --ddp-bucket-size 5000)
trident_layout(distopt_tp2_pp2_dp2 8 2 1 --pipeline-model-parallel-size 2 --use-distributed-optimizer
  --overlap-grad-reduce --ddp-bucket-size 20000)
trident_layout(distopt_pp2_vp2_dp2 4 1 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 7000)
# dp 4 x pp 2: the tied embedding's two copies (first and last stage, at other places of their
# buffers) must stay bitwise equal although a reduce-scatter over 4 would sum each copy's element
# in another order (data_parallel.c sums the embedding over dp whole first); and the same with dp x
# cp = 4 (context parallelism)
trident_layout(distopt_dp4_pp2 8 1 1 --pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce)
trident_layout(cp2_distopt_dp2_pp2 8 1 1 --context-parallel-size 2 --pipeline-model-parallel-size 2
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather)
trident_layout(distopt_dp4_eager512 4 1 1 ENV "OMPI_MCA_btl_vader_eager_limit=512;OMPI_MCA_btl_vader_rndv_eager_limit=512"
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 50000)
# Hierarchical data-parallel collectives (--dp-collectives): --fake-hosts 2 makes ranks 0-1
# and 2-3 believe they share a host each, so the buckets sum inside the "host", then per rail,
# then spread inside again: the one-rank run within the tolerance (only the float sums' order
# differs). layout_hier_used holds that they really went hierarchical, and that auto timed both.
trident_layout(hier_dp4 4 1 1 --fake-hosts 2 --dp-collectives hierarchical)
trident_layout(hier_distopt_dp4_overlap 4 1 1 --fake-hosts 2 --dp-collectives hierarchical
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 5000)
trident_layout(hier_dp4_overlap_auto 4 1 1 --fake-hosts 2 --overlap-grad-reduce --ddp-bucket-size 5000)
# under context parallelism the buckets' group is dp x cp (here all 4 ranks over the 2 "hosts")
trident_layout(hier_cp2_distopt_dp2 4 1 1 --context-parallel-size 2 --fake-hosts 2 --dp-collectives hierarchical
  --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 5000)
add_test(NAME parallel/layout_hier_used COMMAND bash -c
  "set -e; cd ${LAYOUT_DIR}; grep -q 'dp collectives: hierarchical (2 hosts x 2 data-parallel ranks)' hier_dp4.log; \
   grep -q 'dp collectives: hierarchical (2 hosts x 2 data-parallel ranks)' hier_distopt_dp4_overlap.log; \
   grep -Eq 'dp collectives: (flat|hierarchical) .*flat [0-9.]+ ms, hierarchical [0-9.]+ ms' hier_dp4_overlap_auto.log; \
   grep -q 'dp collectives: hierarchical (2 hosts x 2 data-parallel ranks)' moe_hier_ep2_dp4_a2a.log; \
   grep -q 'dp collectives: hierarchical (2 hosts x 2 data-parallel ranks)' moe_hier_distopt_ep2_dp4_a2a.log; \
   grep -q 'dp collectives: hierarchical (2 hosts x 2 data-parallel ranks)' hier_cp2_distopt_dp2.log; \
   ! grep -q 'dp collectives' dp4.log")
set_tests_properties(parallel/layout_hier_used PROPERTIES
  FIXTURES_REQUIRED "layouts_hier_dp4;layouts_hier_distopt_dp4_overlap;layouts_hier_dp4_overlap_auto;layouts_dp4;layouts_moe_hier_ep2_dp4_a2a;layouts_moe_hier_distopt_ep2_dp4_a2a;layouts_hier_cp2_distopt_dp2")

# The overlaps and the progress they make between kernels (ov_progress) change no bit: dp 2
# sums two addends whatever the bucketing, so with and without them the runs are bitwise equal.
set(LAYOUT_TOL 0)
set(LAYOUT_REF dp2)
trident_layout(dp2_overlap_bitwise 2 1 2 --overlap-grad-reduce --ddp-bucket-size 5000)
unset(LAYOUT_REF)
unset(LAYOUT_TOL)
# the distributed optimizer's shard follows the buckets (and the grad norm's order of addition
# with it): its reference has the same buckets
trident_layout(distopt_dp2_buckets 2 1 2 --use-distributed-optimizer --ddp-bucket-size 5000)
set(LAYOUT_TOL 0)
set(LAYOUT_REF distopt_dp2_buckets)
trident_layout(distopt_dp2_overlap_bitwise 2 1 2 --use-distributed-optimizer --overlap-grad-reduce
  --overlap-param-gather --ddp-bucket-size 5000)
# Every buffer crossing comm staged through host memory (--debug-comm-staged: the rule of a device
# backend without a CUDA-aware MPI, src/backend/xfer.h) moves the same floats: bitwise the direct
# runs, for the buckets and the distributed optimizer's shards and gathers, and for the tensor-
# parallel collectives with the stage transfers and their scatter/gather (the MoE exchange: below)
set(LAYOUT_REF distopt_dp2_overlap_bitwise)
trident_layout(staged_distopt_dp2_overlap 2 1 2 --use-distributed-optimizer --overlap-grad-reduce
  --overlap-param-gather --ddp-bucket-size 5000 --debug-comm-staged)
set(LAYOUT_REF tp2_pp2_vp2)
trident_layout(staged_tp2_pp2_vp2 4 2 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
  --debug-comm-staged)
unset(LAYOUT_REF)
unset(LAYOUT_TOL)

# Context parallelism (--context-parallel-size, --cp-comm-type a2a; docs/parallelism.md): each
# sample's 64 positions cut into 2C chunks, rank i holding chunks i and 2C - 1 - i, positions and
# dropout masks by global position, q, k, v exchanged for heads around the attention core (a2a of
# 2 x 32 x 192 / 2 floats = 24 KiB at cp 2, above the eager limit), gradients over dp x cp:
# against the one-rank run, with dropout on. cp 2 x tp 2 (4 heads: one a rank), sequence parallel
# too; interleaved pipeline; the distributed optimizer sharded over dp x cp with both overlaps;
# selective recomputation redoing the exchanged core.
trident_layout(cp2 2 1 2 --context-parallel-size 2 --cp-comm-type a2a)
trident_layout(cp4 4 1 2 --context-parallel-size 4 --cp-comm-type a2a)
trident_layout(cp2_sp_tp2 4 2 2 --context-parallel-size 2 --cp-comm-type a2a --sequence-parallel)
trident_layout(cp2_a2a_rc_selective 2 1 2 --context-parallel-size 2 --cp-comm-type a2a --recompute-granularity selective)
# --cp-comm-type p2p (the default, as Megatron's): the ring of key/value blocks, each step's
# transfer posted before the block at hand's attention, merged by lse; backward with the dk, dv
# accumulators travelling home. The rows below without a comm type run it too.
trident_layout(cp2_p2p 2 1 2 --context-parallel-size 2 --cp-comm-type p2p)
trident_layout(cp4_p2p 4 1 2 --context-parallel-size 4 --cp-comm-type p2p)
trident_layout(cp2_p2p_sp_tp2 4 2 2 --context-parallel-size 2 --cp-comm-type p2p --sequence-parallel)
trident_layout(cp2_pp2_vp2 4 1 1 --context-parallel-size 2 --pipeline-model-parallel-size 2
  --num-layers-per-virtual-pipeline-stage 2)
trident_layout(cp2_distopt_dp2_overlap 4 1 1 --context-parallel-size 2 --use-distributed-optimizer
  --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 5000)
trident_layout(cp2_rc_selective 2 1 2 --context-parallel-size 2 --recompute-granularity selective)
# --cp-comm-type all_gather: every rank's keys and values gathered, this rank's queries against each
# rank's block at global positions (the attention block entries), merged by lse; the key/value
# gradients reduce-scattered home
trident_layout(cp2_ag 2 1 2 --context-parallel-size 2 --cp-comm-type all_gather)
trident_layout(cp4_ag 4 1 2 --context-parallel-size 4 --cp-comm-type all_gather)
trident_layout(cp2_ag_sp_tp2 4 2 2 --context-parallel-size 2 --cp-comm-type all_gather --sequence-parallel)
trident_layout(cp2_ag_rc_selective_distopt_dp2 4 1 1 --context-parallel-size 2 --cp-comm-type all_gather
  --recompute-granularity selective --use-distributed-optimizer --overlap-grad-reduce)
add_test(NAME parallel/cp_refusals COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cp_refusals.sh $<TARGET_FILE:trident>
  ${LAYOUT_DATA} ${TRIDENT_SHARED_DATA}/gpt2/vocab.json ${TRIDENT_SHARED_DATA}/gpt2/merges.txt)
set_tests_properties(parallel/cp_refusals PROPERTIES FIXTURES_REQUIRED layouts_data ENVIRONMENT "${TD_MPI_ENV}"
  TIMEOUT 60)

# Activation recomputation: bitwise the run without it in the same layout (tolerance 0), and in
# the pipeline schedules against the one-rank run.
set(LAYOUT_TOL 0)
trident_layout(rc_full_uniform 1 1 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 3)
trident_layout(rc_full_block 1 1 2 --recompute-granularity full --recompute-method block --recompute-num-layers 5)
trident_layout(rc_selective 1 1 2 --recompute-granularity selective)
set(LAYOUT_REF tp2)
trident_layout(rc_tp2_full 2 2 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
set(LAYOUT_REF tp4)
trident_layout(rc_tp4_full 4 4 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2)
unset(LAYOUT_REF)
unset(LAYOUT_TOL)
trident_layout(rc_pp2_1f1b_full 2 1 1 --pipeline-model-parallel-size 2 --recompute-granularity full
  --recompute-method uniform --recompute-num-layers 2)
trident_layout(rc_pp2_gpipe_block 2 1 2 --pipeline-model-parallel-size 2 --pipeline-schedule gpipe
  --recompute-granularity full --recompute-method block --recompute-num-layers 2)
trident_layout(rc_distopt_dp2_full 2 1 1 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
  --ddp-bucket-size 5000 --recompute-granularity full --recompute-method block --recompute-num-layers 4)
trident_layout(rc_tp2_pp2_vp2_selective 4 2 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2
  --recompute-granularity selective)

# Mixed precision, against the one-rank run in the same precision. --bf16: every layout rounds
# the same fp32 values into bf16, but those values differ between layouts in their last fp32
# bits (sums in other orders), and where one lies within that of a bf16 rounding boundary it
# rounds the other way: a 2^-8 change of that element (about 1 in 10^4 elements, where fp32
# layouts differ by 1e-7 relative). Data parallelism sums nothing in another order before the
# grads and stays within 3e-5; tensor parallelism's split sums flip roundings in every layer
# (measured: grad norm 7e-6 apart at the first iteration, 2.4e-4 after Adam's first step
# magnifies the small grads' differences; parameters 5.4e-4). Tolerance 2e-3. --fp16 with an
# overflow forced at iteration 2 on the last rank: every rank skips it, or the runs part.
set(LAYOUT_TOL 2e-3)
set(LAYOUT_ARCH --bf16)
set(LAYOUT_BASE bf16_baseline)
trident_layout(bf16_baseline 1 1 2)
trident_layout(bf16_tp2 2 2 2)
trident_layout(bf16_pp2_vp2 2 1 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2)
trident_layout(bf16_dp2 2 1 2)
trident_layout(bf16_cp2 2 1 2 --context-parallel-size 2)
trident_layout(bf16_cp2_ag 2 1 2 --context-parallel-size 2 --cp-comm-type all_gather)
trident_layout(bf16_sp_distopt_tp2_pp2_dp2 8 2 1 --sequence-parallel --pipeline-model-parallel-size 2
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000)
set(LAYOUT_ARCH --fp16 --initial-loss-scale 4096 --hysteresis 1)
set(LAYOUT_BASE fp16_baseline)
trident_layout(fp16_baseline 1 1 2 --debug-overflow-iteration 2)
trident_layout(fp16_tp2_pp2_dp2 8 2 1 --debug-overflow-iteration 2 --pipeline-model-parallel-size 2
  --use-distributed-optimizer)
trident_layout(fp16_cp2_dp2 4 1 1 --debug-overflow-iteration 2 --context-parallel-size 2 --use-distributed-optimizer)
unset(LAYOUT_TOL)
set(LAYOUT_ARCH "")

# Bad layouts exit 2 with their message on every rank; a rank killed mid-run ends the job.
add_test(NAME parallel/failures COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/failures.sh $<TARGET_FILE:trident>
  ${LAYOUT_DATA} ${TRIDENT_SHARED_DATA}/gpt2/vocab.json ${TRIDENT_SHARED_DATA}/gpt2/merges.txt)
set_tests_properties(parallel/failures PROPERTIES FIXTURES_REQUIRED layouts_data ENVIRONMENT "${TD_MPI_ENV}")

# Uneven scatter/gather slices: hidden 65 (4 heads of 16 by --kv-channels) x seq 63 x mbs 1 = 4095
# floats a stage transfer, odd, so tp rank 0 sends 2048 and tp rank 1 the 2047 after them (every
# other layout's transfer is a multiple of tp; both halves over Open MPI's 4 KiB eager limit);
# tp 2 x pp 2 (1F1B, the all-gathers behind compute), 4 layers, against this model's one-rank run
set(LAYOUT_ARCH --num-layers 4 --hidden-size 65 --kv-channels 16 --seq-length 63 --max-position-embeddings 64)
set(LAYOUT_BASE odd_baseline)
trident_layout(odd_baseline 1 1 1)
trident_layout(odd_tp2_pp2 4 2 1 --pipeline-model-parallel-size 2)
set(LAYOUT_ARCH "")

# A Llama-shaped model: RMSNorm, rotary positions, SwiGLU, 4 heads in 2 query groups, no biases,
# an untied output layer (on the last stage only), against its own one-rank run.
set(LAYOUT_ARCH --normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 128
  --group-query-attention --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights)
set(LAYOUT_BASE llama_baseline)
trident_layout(llama_baseline 1 1 2)
trident_layout(llama_tp2 2 2 2)
trident_layout(llama_pp2_vp2 2 1 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2)
trident_layout(llama_dp2 2 1 2)
trident_layout(llama_tp2_pp2_dp2 8 2 1 --pipeline-model-parallel-size 2)
trident_layout(llama_tp2_pp2_vp2 4 2 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1)
set(LAYOUT_TOL 0)
trident_layout(llama_rc_selective 1 1 2 --recompute-granularity selective)
set(LAYOUT_REF llama_tp2)
trident_layout(llama_rc_tp2_full 2 2 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 3)
unset(LAYOUT_REF)
unset(LAYOUT_TOL)
trident_layout(llama_rc_pp2_vp2_block 2 1 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2
  --recompute-granularity full --recompute-method block --recompute-num-layers 1)
trident_layout(llama_sp_tp2 2 2 2 --sequence-parallel)
trident_layout(llama_sp_distopt_rc_tp2_pp2_dp2 8 2 1 --sequence-parallel --pipeline-model-parallel-size 2
  --use-distributed-optimizer --recompute-granularity selective)
trident_layout(llama_distopt_dp2 2 1 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
  --ddp-bucket-size 6000)
# context parallelism: rope at each token's global position, 2 query groups split over cp 2
trident_layout(llama_cp2 2 1 2 --context-parallel-size 2 --cp-comm-type a2a)
trident_layout(llama_cp4_p2p 4 1 2 --context-parallel-size 4 --cp-comm-type p2p)
# all_gather needs no heads split: tp 2 leaves one key/value group a rank, cp 2 still works
trident_layout(llama_cp2_ag_tp2 4 2 2 --context-parallel-size 2 --cp-comm-type all_gather)

# LoRA (docs/finetune.md) on the Llama-shaped model: rank-4 adapters on all seven projections (the
# fused q, k|v and gate|up outputs' column ranges, o and down row-parallel) with dropout on their
# input, everything else frozen (no gradients, no optimizer state); the layouts against its own
# one-rank run, the distributed optimizer's buckets over the adapters alone; under sequence
# parallelism the adapters' whole terms added once before the reduce-scatters.
set(LAYOUT_LLAMA ${LAYOUT_ARCH})
set(LAYOUT_ARCH ${LAYOUT_LLAMA} --lora-rank 4 --lora-alpha 16 --lora-target-modules all-linear --lora-dropout 0.1)
set(LAYOUT_BASE lora_baseline)
trident_layout(lora_baseline 1 1 2)
trident_layout(lora_tp2 2 2 2)
trident_layout(lora_pp2_vp2 2 1 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2)
trident_layout(lora_distopt_dp2 2 1 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
  --ddp-bucket-size 3000)
trident_layout(lora_sp_tp2 2 2 2 --sequence-parallel)
trident_layout(lora_sp_distopt_tp2_pp2_dp2 8 2 1 --sequence-parallel --pipeline-model-parallel-size 2
  --use-distributed-optimizer)
# context parallelism: the adapters' dropout by global position, their gradients over dp x cp
trident_layout(lora_cp2_distopt_dp2 4 1 1 --context-parallel-size 2 --use-distributed-optimizer)
# ... and under --bf16 (the adapters read the kept inputs the base's GEMMs read, widened to fp32;
# their GEMMs in bf16), within the bf16 layouts' tolerance (see there) against the bf16 one-rank run
set(LAYOUT_ARCH ${LAYOUT_LLAMA} --lora-rank 4 --lora-alpha 16 --lora-target-modules all-linear --lora-dropout 0.1 --bf16)
set(LAYOUT_BASE lora_bf16_baseline)
set(LAYOUT_TOL 2e-3)
trident_layout(lora_bf16_baseline 1 1 2)
trident_layout(lora_bf16_sp_distopt_tp2_pp2_dp2 8 2 1 --sequence-parallel --pipeline-model-parallel-size 2
  --use-distributed-optimizer)
unset(LAYOUT_TOL)
set(LAYOUT_ARCH ${LAYOUT_LLAMA})

# A mixture of experts (src/model/moe.c), 4 layers (the last --num-layers given counts): 4 SwiGLU experts a layer, top-2, a gated shared expert
# (Qwen2-MoE's), the load-balancing and z losses on, dropless; data and pipeline layouts (interleaved too) and the distributed
# optimizer against the one-rank run. The routing must not depend on the layout: the same tokens
# meet the same router weights on every rank that holds them. The load-balancing loss is a
# micro-batch's (as Megatron's): the same micro-batch size in every layout.
set(LAYOUT_ARCH --num-layers 4 --swiglu --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 1e-2
  --moe-z-loss-coeff 1e-3 --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate)
set(LAYOUT_BASE moe_baseline)
trident_layout(moe_baseline 1 1 2)
trident_layout(moe_pp2_vp2 2 1 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1)
trident_layout(moe_distopt_pp2_dp2 4 1 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer
  --overlap-grad-reduce --ddp-bucket-size 20000)
# tensor parallelism (Megatron's --expert-tensor-parallel-size, = tp): each expert and the shared
# expert split over tp as the dense MLP (fc by columns, fc2 by rows), every tp rank routing the same
# tokens; with sequence parallelism, data and pipeline parallelism and the distributed optimizer
trident_layout(moe_tp2 2 2 2)
trident_layout(moe_distopt_sp_tp2_pp2 4 2 2 --sequence-parallel --pipeline-model-parallel-size 2
  --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000)
# tp 2 x ep 2: each expert split over tp, the experts over ep (the exchange between the dp ranks of
# the same tp rank), with sequence parallelism (allgather) and without (alltoall)
trident_layout(moe_sp_tp2_ep2 4 2 2 --sequence-parallel --expert-model-parallel-size 2)
trident_layout(moe_tp2_ep2_a2a 4 2 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
# the token exchange staged through host memory (--debug-comm-staged, src/backend/xfer.h): bitwise
set(LAYOUT_TOL 0)
set(LAYOUT_REF moe_tp2_ep2_a2a)
trident_layout(moe_staged_tp2_ep2_a2a 4 2 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall
  --debug-comm-staged)
unset(LAYOUT_REF)
unset(LAYOUT_TOL)
# --expert-tensor-parallel-size 1: the experts whole, split over the tp ranks (and over ep: 1 of the 4
# a rank at tp 2 x ep 2), the tp ranks' partial outputs summed by the layer
trident_layout(moe_etp1_tp2 2 2 2 --expert-tensor-parallel-size 1)
trident_layout(moe_etp1_sp_tp2_ep2 4 2 2 --expert-tensor-parallel-size 1 --sequence-parallel
  --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
# expert parallelism (carved out of dp): each rank holds E / ep experts, the tokens cross the ep
# group by the allgather dispatcher (the default) or the alltoall one, the experts' gradients are
# summed over the expert-data-parallel group only (ep 2 x edp 2 with the distributed optimizer's
# shards over it)
trident_layout(moe_ep4_a2a 4 1 2 --expert-model-parallel-size 4 --moe-token-dispatcher-type alltoall)
# the experts' GEMMs grouped (--moe-grouped-gemm)
trident_layout(moe_grouped_ep2 2 1 2 --expert-model-parallel-size 2 --moe-grouped-gemm)
trident_layout(moe_pp2_ep2 4 1 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2)
trident_layout(moe_distopt_ep2_dp4_a2a 4 1 2 --expert-model-parallel-size 2 --use-distributed-optimizer
  --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000 --moe-token-dispatcher-type alltoall)
# under hierarchical dp collectives (--fake-hosts 2: ranks 0-1 and 2-3 a "host" each): the
# dense buckets sum over the hierarchical view of dp 4, the experts' over their flat
# expert-data-parallel group (ranks 0,2 and 1,3: the same experts), plain and sharded
trident_layout(moe_hier_ep2_dp4_a2a 4 1 2 --fake-hosts 2 --expert-model-parallel-size 2
  --moe-token-dispatcher-type alltoall --dp-collectives hierarchical)
trident_layout(moe_hier_distopt_ep2_dp4_a2a 4 1 2 --fake-hosts 2 --expert-model-parallel-size 2
  --moe-token-dispatcher-type alltoall --dp-collectives hierarchical --use-distributed-optimizer
  --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000)
# context parallelism (each rank routes its own chunks of every sample; the load-balancing and z
# losses count the micro-batch's tokens per expert summed over cp): cp 2; ep carved out of dp x cp
# (cp 2 x ep 2: the two chunks' tokens cross to each other's experts); ep 2 x edp 2 over dp 2 x cp 2
# with the distributed optimizer (the experts' shards over the expert-data-parallel group, which
# spans cp); cp 2 x tp 2 with sequence parallelism
trident_layout(moe_cp2 2 1 2 --context-parallel-size 2)
trident_layout(moe_cp2_ep2 2 1 2 --context-parallel-size 2 --expert-model-parallel-size 2)
trident_layout(moe_cp2_ep2_distopt_dp2_a2a 4 1 2 --context-parallel-size 2 --expert-model-parallel-size 2
  --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000 --moe-token-dispatcher-type alltoall)
trident_layout(moe_cp2_sp_tp2 4 2 2 --context-parallel-size 2 --sequence-parallel)
# ... with pipeline stages, and with full recomputation (the recomputed forward sums the counts
# over cp again, on every cp rank alike)
trident_layout(moe_cp2_pp2 4 1 2 --context-parallel-size 2 --pipeline-model-parallel-size 2)
trident_layout(moe_cp2_rc_full 2 1 2 --context-parallel-size 2 --recompute-granularity full --recompute-method uniform
  --recompute-num-layers 1)
# LoRA on the MoE model's attention (q, k, v, o adapters; the experts, the router and the shared
# expert frozen: no gradients, no optimizer state): tp 2 x ep 2 (alltoall) and, with sequence
# parallelism, the distributed optimizer over the adapters alone, against its own one-rank run
set(LAYOUT_MOE ${LAYOUT_ARCH})
set(LAYOUT_ARCH ${LAYOUT_MOE} --lora-rank 4 --lora-alpha 16 --lora-target-modules q_proj,k_proj,v_proj,o_proj
  --lora-dropout 0.1)
set(LAYOUT_BASE lora_moe_baseline)
trident_layout(lora_moe_baseline 1 1 2)
trident_layout(lora_moe_tp2_ep2_a2a 4 2 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
trident_layout(lora_moe_sp_distopt_tp2_ep2 4 2 2 --sequence-parallel --expert-model-parallel-size 2
  --use-distributed-optimizer --moe-grouped-gemm)
# LoRA on the experts too (gate, up and down adapters of every expert, stacked and split as the
# experts; q too; the router frozen): each expert's adapters on its own rows, over ep (allgather
# and alltoall), ep x tp (each expert's adapters split as it is) with sequence parallelism and
# grouped GEMMs, whole experts over tp (--expert-tensor-parallel-size 1), pipeline stages, and the
# distributed optimizer over dp x ep; against one rank
set(LAYOUT_ARCH --num-layers 4 --swiglu --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64
  --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3 --lora-rank 4 --lora-alpha 16
  --lora-target-modules q_proj,gate_proj,up_proj,down_proj)
set(LAYOUT_BASE lora_experts_baseline)
trident_layout(lora_experts_baseline 1 1 2)
trident_layout(lora_experts_ep2 2 1 2 --expert-model-parallel-size 2)
trident_layout(lora_experts_tp2_ep2_a2a 4 2 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
trident_layout(lora_experts_sp_tp2_ep2_grouped 4 2 2 --sequence-parallel --expert-model-parallel-size 2
  --moe-grouped-gemm)
trident_layout(lora_experts_etp1_tp2 2 2 2 --expert-tensor-parallel-size 1)
trident_layout(lora_experts_pp2_ep2 4 1 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2)
trident_layout(lora_experts_distopt_ep2_dp4_a2a 4 1 2 --expert-model-parallel-size 2 --use-distributed-optimizer
  --moe-token-dispatcher-type alltoall)
# ... with --lora-dropout: each expert row's adapter input dropped by its token's (sample, position),
# the module and the expert, not by the rank holding the expert nor the rows' order: the same masks
# over ep (allgather, alltoall with tp), sp tp x ep grouped, and whole experts over tp
set(LAYOUT_ARCH ${LAYOUT_ARCH} --lora-dropout 0.1)
set(LAYOUT_BASE lora_experts_drop_baseline)
trident_layout(lora_experts_drop_baseline 1 1 2)
trident_layout(lora_experts_drop_ep2 2 1 2 --expert-model-parallel-size 2)
trident_layout(lora_experts_drop_tp2_ep2_a2a 4 2 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
trident_layout(lora_experts_drop_sp_tp2_ep2_grouped 4 2 2 --sequence-parallel --expert-model-parallel-size 2
  --moe-grouped-gemm)
trident_layout(lora_experts_drop_etp1_tp2 2 2 2 --expert-tensor-parallel-size 1)
# at cp 2 x ep 2 and cp 2: each row's token by its global position (the rank's chunks), the
# expert's index as the mask's position whatever the layer's context-parallel mapping
trident_layout(lora_experts_drop_cp2_ep2 2 1 2 --context-parallel-size 2 --expert-model-parallel-size 2)
trident_layout(lora_experts_drop_cp2 2 1 2 --context-parallel-size 2)
# ... and a gated shared expert (Qwen2-MoE) with its own adapters (the dense MLP's, split over tp as
# it is, whole terms on tp rank 0 as the layer sums its partial output), dropout on
set(LAYOUT_ARCH ${LAYOUT_ARCH} --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate)
set(LAYOUT_BASE lora_experts_shared_baseline)
trident_layout(lora_experts_shared_baseline 1 1 2)
trident_layout(lora_experts_shared_tp2_ep2_a2a 4 2 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
trident_layout(lora_experts_shared_sp_tp2_ep2 4 2 2 --sequence-parallel --expert-model-parallel-size 2)
trident_layout(lora_experts_shared_distopt_pp2_dp2 4 1 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer)
trident_layout(lora_experts_shared_cp2_ep2 2 1 2 --context-parallel-size 2 --expert-model-parallel-size 2)
set(LAYOUT_ARCH ${LAYOUT_MOE})
set(LAYOUT_BASE moe_baseline)
# with capacity (drops over it, per micro-batch as Megatron's per rank): the same drops in every
# layout of the same micro-batch size
set(LAYOUT_ARCH --num-layers 4 --swiglu --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 1e-2
  --moe-expert-capacity-factor 1.0)
set(LAYOUT_BASE moe_cap_baseline)
trident_layout(moe_cap_baseline 1 1 2)
trident_layout(moe_cap_pp2_dp2 4 1 2 --pipeline-model-parallel-size 2)
trident_layout(moe_cap_sp_tp2 2 2 2 --sequence-parallel)
# padded to capacity (every expert runs on its capacity of rows, zeros past its tokens): the same
# training as without, here over ep 2 (the padding crosses the group too)
trident_layout(moe_cap_pad_ep2_a2a 2 1 2 --expert-model-parallel-size 2 --moe-pad-expert-input-to-capacity
  --moe-token-dispatcher-type alltoall)
# under context parallelism the capacity is the micro-batch's: each rank gathers the cp group's
# choices (expert, weight), decides the drops over the whole micro-batch in its token order and
# keeps its own: cp 2, cp 2 x ep 2 (ep carved out of cp), and padded to the micro-batch's capacity
# on every cp rank (alltoall); same_drops.py holds each run's dropped share per iteration to the
# one-rank run's, and above 0
trident_layout(moe_cap_cp2 2 1 2 --context-parallel-size 2)
trident_layout(moe_cap_cp2_ep2 2 1 2 --context-parallel-size 2 --expert-model-parallel-size 2)
trident_layout(moe_cap_pad_cp2_ep2_a2a 2 1 2 --context-parallel-size 2 --expert-model-parallel-size 2
  --moe-pad-expert-input-to-capacity --moe-token-dispatcher-type alltoall)
# ... dropping the latest tokens (the micro-batch's token order across the cp ranks' chunks): cp 4,
# cp 2 x tp 2 with sequence parallelism
set(LAYOUT_ARCH ${LAYOUT_ARCH} --moe-token-drop-policy position)
set(LAYOUT_BASE moe_cap_pos_baseline)
trident_layout(moe_cap_pos_baseline 1 1 2)
trident_layout(moe_cap_pos_cp4 4 1 2 --context-parallel-size 4)
trident_layout(moe_cap_pos_cp2_sp_tp2 4 2 2 --context-parallel-size 2 --sequence-parallel)
add_test(NAME parallel/moe_cap_cp_drops COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/same_drops.py
  ${LAYOUT_DIR}/moe_cap_baseline.jsonl ${LAYOUT_DIR}/moe_cap_cp2.jsonl ${LAYOUT_DIR}/moe_cap_cp2_ep2.jsonl
  ${LAYOUT_DIR}/moe_cap_pad_cp2_ep2_a2a.jsonl -- ${LAYOUT_DIR}/moe_cap_pos_baseline.jsonl
  ${LAYOUT_DIR}/moe_cap_pos_cp4.jsonl ${LAYOUT_DIR}/moe_cap_pos_cp2_sp_tp2.jsonl)
set_tests_properties(parallel/moe_cap_cp_drops PROPERTIES TIMEOUT 20 FIXTURES_REQUIRED
  "layouts_moe_cap_cp2;layouts_moe_cap_cp2_ep2;layouts_moe_cap_pad_cp2_ep2_a2a;layouts_moe_cap_pos_cp4;layouts_moe_cap_pos_cp2_sp_tp2")
# in bf16 (the experts' and the router's GEMMs from bf16 copies; the input widened back to fp32 for
# the router and the dispatch), at the bf16 group's tolerance
set(LAYOUT_TOL 2e-3)
set(LAYOUT_ARCH --num-layers 4 --bf16 --swiglu --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-aux-loss-coeff 1e-2
  --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate)
set(LAYOUT_BASE moe_bf16_baseline)
trident_layout(moe_bf16_baseline 1 1 2)
trident_layout(moe_bf16_pp2_dp2 4 1 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer)
trident_layout(moe_bf16_ep2_a2a 2 1 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
trident_layout(moe_bf16_sp_tp2 2 2 2 --sequence-parallel)
# ... with LoRA on the experts (no shared expert: its adapters are not built)
set(LAYOUT_ARCH --num-layers 4 --bf16 --swiglu --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64
  --moe-aux-loss-coeff 1e-2 --lora-rank 4 --lora-alpha 16 --lora-target-modules all-linear)
set(LAYOUT_BASE lora_experts_bf16_baseline)
trident_layout(lora_experts_bf16_baseline 1 1 2)
trident_layout(lora_experts_bf16_sp_tp2_ep2 4 2 2 --sequence-parallel --expert-model-parallel-size 2)
unset(LAYOUT_TOL)
# --moe-layer-freq: MoE and dense layers mixed (4 MoE layers and 4 SwiGLU MLPs of --ffn-hidden-size
# 96: 3 and 1 on the first stage, 1 and 3 on the second), with the expert bias moving; pp 2, pp 2
# with full recomputation in groups of 2 (a group position holds a MoE layer in one group and a
# dense one in the other), and interleaved pp 2 x dp 2 with the distributed optimizer (chunks of
# MoE layers only, of dense only, and of both), against the one-rank run
set(LAYOUT_ARCH --swiglu --ffn-hidden-size 96 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64
  --moe-aux-loss-coeff 1e-2 --moe-router-score-function sigmoid --moe-router-enable-expert-bias
  --moe-router-bias-update-rate 1e-2 --moe-layer-freq [1,1,0,1,0,0,1,0])
set(LAYOUT_BASE moe_mixed_baseline)
trident_layout(moe_mixed_baseline 1 1 2)
trident_layout(moe_mixed_pp2 2 1 2 --pipeline-model-parallel-size 2)
trident_layout(moe_mixed_rc_pp2 2 1 2 --pipeline-model-parallel-size 2 --recompute-granularity full
  --recompute-method uniform --recompute-num-layers 2)
trident_layout(moe_mixed_distopt_pp2_vp2_dp2 4 1 2 --pipeline-model-parallel-size 2
  --num-layers-per-virtual-pipeline-stage 2 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000)
# ... at cp 2 x ep 2: the expert bias moves by the tokens per expert summed over dp x cp
trident_layout(moe_mixed_cp2_ep2 2 1 2 --context-parallel-size 2 --expert-model-parallel-size 2)
# ... with LoRA on every MLP module: the experts' adapters in the MoE layers, the dense MLP's in
# the others, the expert bias still moving against the load (frozen to the optimizer)
set(LAYOUT_ARCH ${LAYOUT_ARCH} --lora-rank 4 --lora-alpha 16 --lora-target-modules gate_proj,up_proj,down_proj)
set(LAYOUT_BASE lora_moe_mixed_baseline)
trident_layout(lora_moe_mixed_baseline 1 1 2)
trident_layout(lora_moe_mixed_distopt_pp2_ep2 4 1 2 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2
  --use-distributed-optimizer)
# seq_aux_loss (the load-balancing loss per sequence, its mean over a micro-batch's): at cp 4 each
# sequence's tokens per expert are summed over its chunks on the 4 ranks; at cp 2 x ep 2 the tokens
# cross to the other cp rank's experts too
set(LAYOUT_ARCH --num-layers 4 --swiglu --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64
  --moe-aux-loss-coeff 1e-2 --moe-router-load-balancing-type seq_aux_loss)
set(LAYOUT_BASE moe_seqaux_baseline)
trident_layout(moe_seqaux_baseline 1 1 2)
trident_layout(moe_seqaux_cp4 4 1 2 --context-parallel-size 4)
trident_layout(moe_seqaux_cp2_ep2 2 1 2 --context-parallel-size 2 --expert-model-parallel-size 2)
set(LAYOUT_ARCH "")

# BERT (--model bert, docs/bert.md): a sentence-level dataset of the same text under BERT's
# WordPiece (bert-base-uncased's vocab.txt, built by scripts/test-deps.sh), bidirectional
# attention with each sample's padding, token types, the masked-LM head on the tied decoder and
# the sentence-order head, with dropout; every layout against its one-rank run. The weights of
# the loss are the global batch's (1 / its masked tokens, 1 / its samples), so the sums over
# micro-batches and data-parallel ranks are the one-rank run's mean.
# Without that vocab.txt (a build where scripts/test-deps.sh has not run) each of them says so and
# exits 77 (skipped).
set(BERT_VOCAB ${CMAKE_BINARY_DIR}/node/bert/vocab.txt)
set(BERT_DATA ${LAYOUT_DIR}/bert_text_sentence)
set(LAYOUT_NEEDS ${BERT_VOCAB})
set(LAYOUT_NEEDS_CHECK "[ -f ${BERT_VOCAB} ] || { echo '${BERT_VOCAB} is missing (BERT WordPiece vocabulary): run scripts/test-deps.sh ${CMAKE_BINARY_DIR} (make test does): skipped'; exit 77; };")
add_test(NAME parallel/layouts_bert_data COMMAND ${CMAKE_COMMAND} -E env bash -c
  "${LAYOUT_NEEDS_CHECK} set -e; mkdir -p ${LAYOUT_DIR}; ${CMAKE_SOURCE_DIR}/scripts/text-to-jsonl.sh ${TRIDENT_SHARED_DATA}/tinyshakespeare.txt ${LAYOUT_DIR}/bert.jsonl 6000; \
   $<TARGET_FILE:trident> preprocess --input ${LAYOUT_DIR}/bert.jsonl --output-prefix ${LAYOUT_DIR}/bert --split-sentences --tokenizer-type BertWordPieceLowerCase --vocab-file ${BERT_VOCAB}")
set_tests_properties(parallel/layouts_bert_data PROPERTIES FIXTURES_SETUP layouts_bert_data SKIP_RETURN_CODE 77)
set(GPT_LAYOUT_TRAIN ${LAYOUT_TRAIN})
set(LAYOUT_TRAIN --model bert --data-path ${BERT_DATA} --tokenizer-type BertWordPieceLowerCase --vocab-file ${BERT_VOCAB}
  --split 90,10,0 --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
  --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size 8 --train-iters 4 --lr 1e-3 --min-lr 1e-4
  --lr-warmup-iters 1 --lr-decay-style cosine --eval-interval 2 --eval-iters 1 --clip-grad 1.0 --seed 7
  --peak-tflops 1 --log-interval 100 --distributed-timeout-minutes 2)
set(LAYOUT_ARCH "")
set(LAYOUT_DATA_FIXTURE layouts_bert_data)
set(LAYOUT_BASE bert_baseline)
trident_layout(bert_baseline 1 1 2)
foreach(args
    "bert_tp2 2 2 2"
    "bert_pp2_1f1b 2 1 1 --pipeline-model-parallel-size 2"
    "bert_dp2 2 1 2"
    "bert_sp_tp2 2 2 2 --sequence-parallel"
    "bert_tp2_pp2_dp2 8 2 1 --pipeline-model-parallel-size 2"
    "bert_sp_distopt_rc_tp2_pp2_vp2 4 2 1 --sequence-parallel --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --use-distributed-optimizer --overlap-grad-reduce --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    "bert_cp2 2 1 2 --context-parallel-size 2 --cp-comm-type a2a"
    "bert_cp2_sp_tp2 4 2 2 --context-parallel-size 2 --sequence-parallel"
    "bert_cp2_ag 2 1 2 --context-parallel-size 2 --cp-comm-type all_gather")
  separate_arguments(args)
  trident_layout(${args})
endforeach()
# without the sentence-order head (one segment, masked-LM loss only)
set(LAYOUT_ARCH --bert-no-binary-head)
set(LAYOUT_BASE bert_nobh_baseline)
trident_layout(bert_nobh_baseline 1 1 2)
trident_layout(bert_nobh_sp_tp2_pp2_dp2 8 2 1 --sequence-parallel --pipeline-model-parallel-size 2)
# LoRA on BERT (Hugging Face's query, key, value and the other linears by trident's names: every
# linear of the encoder), the embeddings, norms and both heads frozen, against its own one-rank run
set(LAYOUT_ARCH --lora-rank 4 --lora-alpha 16 --lora-target-modules query,key,value,o_proj,up_proj,down_proj
  --lora-dropout 0.1)
set(LAYOUT_BASE bert_lora_baseline)
trident_layout(bert_lora_baseline 1 1 2)
trident_layout(bert_lora_tp2 2 2 2)
trident_layout(bert_lora_sp_distopt_tp2_pp2_dp2 8 2 1 --sequence-parallel --pipeline-model-parallel-size 2
  --use-distributed-optimizer)
# and under --bf16, against its own one-rank run within the bf16 tolerance of the GPT runs above
set(LAYOUT_ARCH --bf16)
set(LAYOUT_TOL 2e-3)
set(LAYOUT_BASE bert_bf16_baseline)
trident_layout(bert_bf16_baseline 1 1 2)
trident_layout(bert_bf16_sp_tp2_pp2_dp2 8 2 1 --sequence-parallel --pipeline-model-parallel-size 2)
unset(LAYOUT_TOL)
unset(LAYOUT_DATA_FIXTURE)
unset(LAYOUT_NEEDS)
set(LAYOUT_ARCH "")
set(LAYOUT_TRAIN ${GPT_LAYOUT_TRAIN})

# Packed documents (--reset-attention-mask --reset-position-ids --eod-mask-loss): the byte data's
# documents are tinyshakespeare's speeches, tens of bytes each ended by EOD (--append-eod), so
# every 64-token sample holds several, and every micro-batch counts its own tokens of loss; each
# rank takes the whole sequence's document starts (sequence parallelism too), the first stage its
# slice of the positions (learned positions), the loss's token count is the global batch's (data
# parallelism); recomputation redoes the attention with the same documents (bitwise). Against the
# one-rank run with the flags, for GPT-2 and the Llama-shaped model (rope, grouped-query).
set(LAYOUT_ARCH --reset-attention-mask --reset-position-ids --eod-mask-loss)
set(LAYOUT_BASE packed_baseline)
trident_layout(packed_baseline 1 1 2)
trident_layout(packed_tp2 2 2 2)
trident_layout(packed_sp_tp2_pp2_vp2 4 2 1 --sequence-parallel --pipeline-model-parallel-size 2
  --num-layers-per-virtual-pipeline-stage 1)
trident_layout(packed_distopt_dp2 2 1 2 --use-distributed-optimizer)
# context parallelism: each rank's chunks of the positions and loss mask, the document starts of
# the whole sequence read by the exchanged attention core
trident_layout(packed_cp2 2 1 2 --context-parallel-size 2 --cp-comm-type a2a)
trident_layout(packed_cp4 4 1 2 --context-parallel-size 4)
trident_layout(packed_cp2_ag 2 1 2 --context-parallel-size 2 --cp-comm-type all_gather)
set(LAYOUT_TOL 0)
trident_layout(packed_rc_full 1 1 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2)
unset(LAYOUT_TOL)
set(LAYOUT_ARCH --normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 128
  --group-query-attention --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights
  --reset-attention-mask --reset-position-ids --eod-mask-loss)
set(LAYOUT_BASE packed_llama_baseline)
trident_layout(packed_llama_baseline 1 1 2)
trident_layout(packed_llama_sp_tp2_pp2_dp2 8 2 1 --sequence-parallel --pipeline-model-parallel-size 2
  --use-distributed-optimizer --recompute-granularity selective)
trident_layout(packed_llama_cp2 2 1 2 --context-parallel-size 2)
set(LAYOUT_ARCH "")
set_tests_properties(unit/test_packed PROPERTIES TIMEOUT 30)

# The exposed and in-flight communication per group, in the metrics file and the breakdown.
add_test(NAME parallel/exposed COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/exposed.sh $<TARGET_FILE:trident>
  ${LAYOUT_DATA} ${TRIDENT_SHARED_DATA}/gpt2/vocab.json ${TRIDENT_SHARED_DATA}/gpt2/merges.txt ${LAYOUT_DIR}/exposed)
set_tests_properties(parallel/exposed PROPERTIES FIXTURES_REQUIRED layouts_data ENVIRONMENT "${TD_MPI_ENV}")

# The threads a rank runs with OMP_NUM_THREADS unset: its host's cores over the ranks sharing them.
add_test(NAME parallel/threads COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/threads.sh $<TARGET_FILE:trident>
  ${LAYOUT_DATA} ${TRIDENT_SHARED_DATA}/gpt2/vocab.json ${TRIDENT_SHARED_DATA}/gpt2/merges.txt ${LAYOUT_DIR}/threads)
set_tests_properties(parallel/threads PROPERTIES FIXTURES_REQUIRED layouts_data ENVIRONMENT "${TD_MPI_ENV}")

trident_layout_batches()
