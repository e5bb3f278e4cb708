# Client area: the tensorwire CLI and the client integration tests.
add_executable(tensorwire_cli ${CMAKE_SOURCE_DIR}/tools/tensorwire.c
                              ${CMAKE_SOURCE_DIR}/tools/bench.c
                              ${CMAKE_SOURCE_DIR}/tools/doctor.c
                              ${CMAKE_SOURCE_DIR}/tools/raw_loop.c
                              ${CMAKE_SOURCE_DIR}/tools/raw_fabric.c
                              ${CMAKE_SOURCE_DIR}/tools/cli_text.c
                              ${CMAKE_SOURCE_DIR}/tools/progress.c)
set_target_properties(tensorwire_cli PROPERTIES OUTPUT_NAME tensorwire)
target_include_directories(tensorwire_cli PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(tensorwire_cli PRIVATE tw_core Threads::Threads)

# Integration tests against a real tensorwired ($TW_BUILD_DIR/tensorwired;
# they skip with 77 when it is not built). Bounded: together well under 90 s.
tw_add_test(test_client_lib ${CMAKE_SOURCE_DIR}/tests/integration/test_client_lib.c
            TIMEOUT 90 LABELS integration)
tw_add_test(test_client_concurrent ${CMAKE_SOURCE_DIR}/tests/integration/test_client_concurrent.c
            TIMEOUT 90 LABELS "integration;tsan")
foreach(t test_client_lib test_client_concurrent)
  target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
endforeach()
# The same two tests over the RDMA data plane (docs/testing.md): every
# provider, pull and push (--push always on both sides), byte-exact. The
# concurrent one stays out of TSan there (the plain run covers the client's
# threads; shm's lock-free queues are uninstrumented, fabric.cmake).
foreach(prov tcp shm)
  foreach(mode pull push)
    if(mode STREQUAL "push")
      set(_push always)
    else()
      set(_push never)
    endif()
    foreach(t test_client_lib test_client_concurrent)
      add_test(NAME ${t}_${prov}_${mode} COMMAND ${t})
      set_tests_properties(${t}_${prov}_${mode} PROPERTIES TIMEOUT 120
        LABELS "integration;fabric" SKIP_RETURN_CODE 77
        ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR};TW_TEST_FABRIC=${prov};TW_TEST_PUSH=${_push}")
    endforeach()
  endforeach()
endforeach()
add_test(NAME test_cli COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/test_cli.sh)
set_tests_properties(test_cli PROPERTIES TIMEOUT 180 LABELS integration SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
add_dependencies(test_client_lib tensorwired)
add_dependencies(test_client_concurrent tensorwired)
# tensorwire get: atomic replacement and bounded memory (test_cli_get.sh);
# the same on a full filesystem, in a private tmpfs (test_cli_fullfs.sh, root
# only: skipped otherwise); the progress line on a pseudo-terminal
# (test_cli_progress.py).
foreach(t test_cli_get test_cli_fullfs)
  add_test(NAME ${t} COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/${t}.sh)
  set_tests_properties(${t} PROPERTIES TIMEOUT 90 LABELS integration SKIP_RETURN_CODE 77
    ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
endforeach()
add_test(NAME test_cli_progress COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/integration/test_cli_progress.py)
set_tests_properties(test_cli_progress PROPERTIES TIMEOUT 90 LABELS integration SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
# tensorwire doctor (GPUDirect admission report): text and JSON on this
# machine and against a sysfs fixture tree.
add_test(NAME test_doctor COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/test_doctor.sh)
set_tests_properties(test_doctor PROPERTIES TIMEOUT 60 LABELS integration SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
