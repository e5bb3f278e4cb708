# Client area: the tensorwire CLI and the client integration tests.
add_executable(tensorwire_cli ${CMAKE_SOURCE_DIR}/tools/tensorwire.c
                              ${CMAKE_SOURCE_DIR}/tools/bench.c
                              ${CMAKE_SOURCE_DIR}/tools/raw_loop.c
                              ${CMAKE_SOURCE_DIR}/tools/raw_fabric.c)
set_target_properties(tensorwire_cli PROPERTIES OUTPUT_NAME tensorwire)
target_include_directories(tensorwire_cli PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(tensorwire_cli PRIVATE tw_core)

# Integration tests against a real tensorwired ($TW_BUILD_DIR/tensorwired;
# they skip with 77 when it is not built). Bounded: together well under 90 s.
tw_add_test(test_client_lib ${CMAKE_SOURCE_DIR}/tests/integration/test_client_lib.c
            TIMEOUT 90 LABELS integration)
tw_add_test(test_client_concurrent ${CMAKE_SOURCE_DIR}/tests/integration/test_client_concurrent.c
            TIMEOUT 90 LABELS "integration;tsan")
foreach(t test_client_lib test_client_concurrent)
  target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
endforeach()
add_test(NAME test_cli COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/test_cli.sh)
set_tests_properties(test_cli PROPERTIES TIMEOUT 90 LABELS integration SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
add_dependencies(test_client_lib tensorwired)
add_dependencies(test_client_concurrent tensorwired)
