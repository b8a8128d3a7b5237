# `trident preprocess` through the binary: exit codes and messages for bad flags and bad input,
# and real runs on tinyshakespeare. tests/CMakeLists.txt includes this file to register the
# tests; each test runs this same file with `cmake -P` and -DCASE=<name> to do one check.

if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(_pp_cases missing_output_prefix missing_input unknown_flag bad_value input_not_found
                text_format_needs_one_key help bad_line plain_text_input skip_bad_lines tinyshakespeare_text split_sentences
                no_usable_document progress_eta)
  foreach(_case ${_pp_cases})
    add_test(NAME e2e/preprocess_${_case}
      COMMAND ${CMAKE_COMMAND} -DBIN=$<TARGET_FILE:trident> -DCASE=${_case} -DDATA=${TRIDENT_SHARED_DATA}
              -DTMP=${CMAKE_BINARY_DIR}/testtmp/e2e-preprocess-${_case} -P ${CMAKE_CURRENT_LIST_FILE})
  endforeach()
  # issue 35's llm.c token files (bench/llmc_tokens.py) and bench/gpu_speed.sh's figures
  add_test(NAME e2e/llmc_tokens COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/e2e/llmc_tokens.py
           $<TARGET_FILE:trident> ${TRIDENT_SHARED_DATA})
  add_test(NAME e2e/gpu_speed_report COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/e2e/gpu_speed_report.py)
  set_tests_properties(e2e/llmc_tokens e2e/gpu_speed_report PROPERTIES TIMEOUT 30)
  return()
endif()

# ---- script mode: one check ---------------------------------------------------------------
file(REMOVE_RECURSE ${TMP})
file(MAKE_DIRECTORY ${TMP})
set(V --vocab-file ${DATA}/gpt2/vocab.json --merge-file ${DATA}/gpt2/merges.txt)
file(WRITE ${TMP}/good.jsonl "{\"text\": \"Hello world\"}\n{\"text\": \"second document\"}\n")

# run(<expected exit code> <regex stderr must match> args...): runs trident preprocess.
function(run want_rc want_err)
  execute_process(COMMAND ${BIN} preprocess ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT "${rc}" STREQUAL "${want_rc}")
    message(FATAL_ERROR "trident preprocess ${ARGN}\nexited ${rc}, expected ${want_rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
  if(NOT "${err}${out}" MATCHES "${want_err}")
    message(FATAL_ERROR "trident preprocess ${ARGN}\noutput does not match '${want_err}'\nstdout: ${out}\nstderr: ${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
  set(last_err "${err}" PARENT_SCOPE)
endfunction()

# no file of the dataset (final or temporary) may exist
function(expect_nothing_written prefix)
  file(GLOB left ${prefix}*)
  if(left)
    message(FATAL_ERROR "a failed run left files behind: ${left}")
  endif()
endfunction()

if(CASE STREQUAL "missing_output_prefix")
  run(2 "--output-prefix is required" --input ${TMP}/good.jsonl ${V})
elseif(CASE STREQUAL "missing_input")
  run(2 "--input is required" --output-prefix ${TMP}/out ${V})
elseif(CASE STREQUAL "unknown_flag")
  run(2 "unknown flag --bogus" --input ${TMP}/good.jsonl --output-prefix ${TMP}/out ${V} --bogus 1)
elseif(CASE STREQUAL "bad_value")
  run(2 "--workers 0 is out of range" --input ${TMP}/good.jsonl --output-prefix ${TMP}/out ${V} --workers 0)
  run(2 "--input-format 'xml' is not one of" --input ${TMP}/good.jsonl --output-prefix ${TMP}/out ${V}
      --input-format xml)
elseif(CASE STREQUAL "input_not_found")
  run(2 "--input ${TMP}/nope.jsonl: No such file" --input ${TMP}/nope.jsonl --output-prefix ${TMP}/out ${V})
  run(2 "--output-prefix ${TMP}/no/such/out: folder" --input ${TMP}/good.jsonl --output-prefix ${TMP}/no/such/out ${V})
  run(2 "--vocab-file ${TMP}/v.json: No such file" --input ${TMP}/good.jsonl --output-prefix ${TMP}/out
      --vocab-file ${TMP}/v.json --merge-file ${DATA}/gpt2/merges.txt)
  expect_nothing_written(${TMP}/out)
elseif(CASE STREQUAL "text_format_needs_one_key")
  run(2 "--input-format text takes one --json-keys" --input ${TMP}/good.jsonl --output-prefix ${TMP}/out ${V}
      --input-format text --json-keys a b)
elseif(CASE STREQUAL "help")
  run(0 "--json-keys" --help)
elseif(CASE STREQUAL "bad_line")
  file(WRITE ${TMP}/bad.jsonl "{\"text\": \"fine\"}\n{\"text\": \"broken\n{\"text\": \"fine\"}\n")
  run(1 "bad.jsonl:2: malformed JSON.*--skip-bad-lines" --input ${TMP}/bad.jsonl --output-prefix ${TMP}/out ${V})
  expect_nothing_written(${TMP}/out)
elseif(CASE STREQUAL "plain_text_input")
  # plain text given as JSON lines (no --input-format text): the hint is --input-format text, not
  # --skip-bad-lines (which would skip every line), when the first line is not a JSON object, or a
  # later one of a .txt file (its first a JSON line); a bad JSON line in a .txt keeps the old hint
  file(WRITE ${TMP}/x.data "Hello world.\nSecond line.\n")
  file(WRITE ${TMP}/x.txt "{\"text\": \"a JSON line\"}\nHello world.\n")
  file(WRITE ${TMP}/y.txt "{\"text\": \"a JSON line\"}\n{\"text\": \"broken\n")
  foreach(f x.data:1:its.first.line.is.not.a.JSON.object x.txt:2:its.name.ends.in..txt.and.the.line.is.not.a.JSON.object)
    string(REPLACE ":" ";" f "${f}")
    list(GET f 0 name)
    list(GET f 1 line)
    list(GET f 2 why)
    run(1 "${name}:${line}: [^\n]*; the file does not look like JSON lines \\(${why}\\): to read it as plain text, one document a file, pass --input-format text\n$"
        --input ${TMP}/${name} --output-prefix ${TMP}/out ${V})
    if("${last_err}" MATCHES "skip-bad-lines")
      message(FATAL_ERROR "${name}: --skip-bad-lines suggested for a plain text file: ${last_err}")
    endif()
    expect_nothing_written(${TMP}/out)
  endforeach()
  run(1 "y.txt:2: malformed JSON[^\n]*; fix the line or pass --skip-bad-lines\n$" --input ${TMP}/y.txt --output-prefix ${TMP}/out ${V})
  run(0 "" --input ${TMP}/x.data --input-format text --output-prefix ${TMP}/out ${V})
elseif(CASE STREQUAL "skip_bad_lines")
  file(WRITE ${TMP}/bad.jsonl "{\"text\": \"fine\"}\n{\"text\": 3}\n{\"text\": \"fine\"}\n")
  run(0 "skipping bad line .*bad.jsonl:2: the value of \"text\" is a number.*skipped 1 bad line\n"
      --input ${TMP}/bad.jsonl --output-prefix ${TMP}/out ${V} --skip-bad-lines)
  file(SIZE ${TMP}/out_text_document.idx size)
  if(NOT size EQUAL 82)
    message(FATAL_ERROR "expected 2 documents in the index (82 bytes), got ${size} bytes")
  endif()
  # docs/preprocess.md: the first ten bad lines are printed, then the total. 15 bad lines in one
  # batch (and with 2 workers) print exactly lines 2..11 (of the bad ones, in input order)
  set(many "{\"text\": \"fine\"}\n")
  foreach(i RANGE 1 15)
    string(APPEND many "{\"text\": ${i}}\n")
  endforeach()
  file(WRITE ${TMP}/many.jsonl "${many}")
  foreach(workers 1 2)
    run(0 "skipped 15 bad lines" --input ${TMP}/many.jsonl --output-prefix ${TMP}/many${workers} ${V} --skip-bad-lines
        --workers ${workers})
    string(REGEX MATCHALL "warning: skipping bad line [^\n]*many.jsonl:([0-9]+):" shown "${last_err}")
    list(LENGTH shown n)
    if(NOT n EQUAL 10 OR NOT "${shown}" MATCHES "many.jsonl:2:.*many.jsonl:11:$")
      message(FATAL_ERROR "--workers ${workers}: expected warnings for lines 2..11, got ${n}:\n${last_err}")
    endif()
  endforeach()
elseif(CASE STREQUAL "no_usable_document")
  # nothing to write (empty texts, blank lines, an empty file, only bad lines skipped): exit 1
  # naming the input and what its lines were; no dataset is left behind
  file(WRITE ${TMP}/empty.jsonl "{\"text\": \"\"}\n\n{\"text\": \"\"}\n")
  run(1 "no usable document in ${TMP}/empty.jsonl: 2 documents read, 2 empty \\(no tokens for text\\), 0 bad lines skipped, 1 blank line; nothing written"
      --input ${TMP}/empty.jsonl --output-prefix ${TMP}/out ${V} --workers 1)
  expect_nothing_written(${TMP}/out)
  file(WRITE ${TMP}/zero.jsonl "")
  run(1 "no usable document in ${TMP}/zero.jsonl: 0 documents read" --input ${TMP}/zero.jsonl --output-prefix ${TMP}/out ${V})
  file(WRITE ${TMP}/bad.jsonl "{\"text\": 3}\n")
  run(1 "no usable document in ${TMP}/bad.jsonl: 0 documents read, 0 empty \\(no tokens for text\\), 1 bad line skipped"
      --input ${TMP}/bad.jsonl --output-prefix ${TMP}/out ${V} --skip-bad-lines)
  expect_nothing_written(${TMP}/out)
elseif(CASE STREQUAL "progress_eta")
  # an uncompressed input's size is known: progress lines (every --log-interval x 1000 documents)
  # give the share done and the time left
  string(REPEAT "All the world's a stage, and all the men and women merely players. " 6 text)
  string(REPEAT "{\"text\": \"${text}\"}\n" 3000 lines)
  file(WRITE ${TMP}/big.jsonl "${lines}")
  run(0 "preprocess: [0-9]+ documents \\([0-9]+ docs/s, [0-9.]+ MB/s, [0-9]+%, about [0-9]+ s left\\)"
      --input ${TMP}/big.jsonl --output-prefix ${TMP}/big ${V} --log-interval 1 --workers 1)
elseif(CASE STREQUAL "tinyshakespeare_text")
  # the whole file is one document: 34-byte header, one length, one pointer, doc index 0 1
  run(0 "preprocess: 1 document, .*2 workers\\).*wrote .*out_text_document.*\\(1 document, [0-9]+ tokens\\)" --input ${DATA}/tinyshakespeare.txt --input-format text
      --output-prefix ${TMP}/out ${V} --append-eod --workers 2)
  file(SIZE ${TMP}/out_text_document.idx size)
  if(NOT size EQUAL 62)
    message(FATAL_ERROR "expected a 62-byte index, got ${size}")
  endif()
  file(READ ${TMP}/out_text_document.idx head LIMIT 18 HEX)
  if(NOT head STREQUAL "4d4d49444944580000010000000000000008")
    message(FATAL_ERROR "unexpected .idx header ${head}")
  endif()
  file(SIZE ${TMP}/out_text_document.bin bytes)
  if(bytes LESS 400000 OR bytes GREATER 800000)
    message(FATAL_ERROR "implausible token count: ${bytes} bytes of uint16 tokens for 1.1 MB of text")
  endif()
  file(GLOB left ${TMP}/*.tmp-*)
  if(left)
    message(FATAL_ERROR "temporaries left behind: ${left}")
  endif()
elseif(CASE STREQUAL "split_sentences")
  # 4 documents, 9 sentences (abbreviations, initials, a decimal, quotes, an ellipsis, a blank
  # line); the empty one is skipped. The .idx: 9 sequences, document index 0 3 5 9 (4 entries).
  file(WRITE ${TMP}/docs.jsonl
    "{\"text\": \"Mr. Smith paid $3.50 for it. J. R. R. Tolkien wrote books. Did he?\"}\n"
    "{\"text\": \"\"}\n"
    "{\"text\": \"She said \\\"Stop.\\\" Then she left... and came back\"}\n"
    "{\"text\": \"Title\\n\\nDr. Who arrived at 5 p.m. today! Really?! Yes, e.g. Here.\"}\n")
  run(0 "4 documents.*wrote .*out_text_sentence.{bin,idx} \\(3 documents, 9 sentences, [0-9]+ tokens\\); skipped 1 empty"
      --input ${TMP}/docs.jsonl --output-prefix ${TMP}/out ${V} --split-sentences --append-eod)
  if(EXISTS ${TMP}/out_text_document.idx)
    message(FATAL_ERROR "--split-sentences wrote a _document dataset")
  endif()
  file(READ ${TMP}/out_text_sentence.idx head LIMIT 16 OFFSET 18 HEX)
  if(NOT head STREQUAL "09000000000000000400000000000000")
    message(FATAL_ERROR "expected 9 sequences and 4 document-index entries, got header bytes ${head}")
  endif()
  file(SIZE ${TMP}/out_text_sentence.idx size)
  file(READ ${TMP}/out_text_sentence.idx docs OFFSET 142 HEX) # 34 + 9 x 12
  if(NOT size EQUAL 174 OR NOT docs STREQUAL
     "0000000000000000030000000000000005000000000000000900000000000000")
    message(FATAL_ERROR "expected document index 0 3 5 9 in a 174-byte .idx, got ${size} bytes, ${docs}")
  endif()
  run(0 "9 sentences" --input ${TMP}/docs.jsonl --output-prefix ${TMP}/w2 ${V} --split-sentences --append-eod
      --workers 2)
  foreach(ext bin idx)
    file(SHA256 ${TMP}/out_text_sentence.${ext} a)
    file(SHA256 ${TMP}/w2_text_sentence.${ext} b)
    if(NOT a STREQUAL b)
      message(FATAL_ERROR "--workers 2 wrote a different .${ext}")
    endif()
  endforeach()
  execute_process(COMMAND ${BIN} data-info --data-path ${TMP}/out_text_sentence --seq-length 8 --split 1,0,0
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "sequences 9 in 3 documents" OR NOT out MATCHES "train +9 \\[0, 9\\)")
    message(FATAL_ERROR "trident data-info on the sentence dataset (exit ${rc}):\n${out}${err}")
  endif()
else()
  message(FATAL_ERROR "unknown CASE ${CASE}")
endif()
