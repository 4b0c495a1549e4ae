# ctest driver (no shell): runs `anelab tokenize --ids` and `--decode` on the TinyStories prefix with the
# GPT-2 tokenizer and compares with the reference id file and the source text.
# cmake -DANELAB=<binary> -DDATA=<data dir> -DWORK=<scratch dir> -P cli_tokenize_test.cmake
set(text "${DATA}/tinystories/tinystories_valid_prefix.txt")
set(ref "${DATA}/reference/tinystories_prefix_ids_gpt2.txt")
if(NOT EXISTS "${text}" OR NOT EXISTS "${ref}")
  message("reference data missing under ${DATA}: skipped")
  return()
endif()
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${ANELAB}" tokenize --tokenizer "${DATA}/gpt2" --ids "${text}" "${WORK}/ids.txt"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "anelab tokenize --ids failed: ${rc}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/ids.txt" "${ref}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ids differ from ${ref}")
endif()
execute_process(COMMAND "${ANELAB}" tokenize --tokenizer "${DATA}/gpt2" --decode "${WORK}/ids.txt" "${WORK}/back.txt"
                RESULT_VARIABLE rc)
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/back.txt" "${text}" RESULT_VARIABLE rc2)
if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "decode of the ids does not give back ${text}")
endif()
execute_process(COMMAND "${ANELAB}" tokenize --tokenizer "${WORK}/missing.bin" "${text}" "${WORK}/x.bin"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "anelab: error: \\[tokenizer\\]")
  message(FATAL_ERROR "missing tokenizer not reported as an error: ${rc} ${err}")
endif()
