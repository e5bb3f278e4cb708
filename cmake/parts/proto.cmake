# Protocol area: the micro-benchmark and the check that the golden vectors
# are what scripts/gen-vectors.py writes (spec, script and files in step).
add_executable(bench_proto ${CMAKE_SOURCE_DIR}/bench/bench_proto.c)
target_link_libraries(bench_proto PRIVATE tw_core)
set_target_properties(bench_proto PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

find_program(TW_PYTHON3 python3)
if(TW_PYTHON3)
  add_test(NAME proto_vectors_current
           COMMAND ${TW_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/gen-vectors.py --check
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(proto_vectors_current PROPERTIES TIMEOUT 60 LABELS unit)
endif()
