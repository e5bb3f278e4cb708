# src/proto/: the check that the golden vectors are what
# scripts/gen-vectors.py writes (spec, script and files in step). The codec
# unit tests are tests/unit/test_proto_*.c; its benchmark is bench.cmake.
find_program(TW_PYTHON3 python3)
if(TW_PYTHON3)
  add_test(NAME proto_vectors_current
           COMMAND ${TW_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/gen-vectors.py --check
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(proto_vectors_current PROPERTIES TIMEOUT 60 LABELS unit)
endif()
