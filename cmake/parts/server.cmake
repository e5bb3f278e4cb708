# tensorwired: the daemon (src/server/, not part of the library), its unit
# tests (tests/server/, label "unit") and integration tests
# (tests/integration/, label "integration").
file(GLOB TW_SERVER_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/*.c)
list(REMOVE_ITEM TW_SERVER_SOURCES ${CMAKE_SOURCE_DIR}/src/server/main.c)
# Everything but main(), so tests can link the server's modules.
add_library(tw_server STATIC ${TW_SERVER_SOURCES})
# /metrics (src/server/metrics.c): libmicrohttpd's header is required to
# build (scripts/install-deps.sh installs libmicrohttpd-dev), but the
# library is not linked: tensorwired dlopens libmicrohttpd.so.12 only when
# --metrics is given, so it starts on hosts without it.
pkg_check_modules(MHD REQUIRED libmicrohttpd)
target_include_directories(tw_server PRIVATE ${MHD_INCLUDE_DIRS})
target_link_libraries(tw_server PUBLIC tw_core ${CMAKE_DL_LIBS})
add_executable(tensorwired ${CMAKE_SOURCE_DIR}/src/server/main.c)
target_link_libraries(tensorwired PRIVATE tw_server)
set_target_properties(tensorwired PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

file(GLOB TW_SERVER_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/server/test_*.c)
foreach(src ${TW_SERVER_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  if(name STREQUAL "test_srv_slab")
    # The slab faults arenas in on a helper thread: also under ThreadSanitizer.
    tw_add_test(${name} ${src} LABELS unit tsan LIBS tw_server)
  else()
    tw_add_test(${name} ${src} LABELS unit LIBS tw_server)
  endif()
endforeach()

# Integration tests: each starts its own tensorwired on an ephemeral port.
add_library(tw_itest STATIC ${CMAKE_SOURCE_DIR}/tests/integration/itest.c)
target_link_libraries(tw_itest PUBLIC tw_server)
target_include_directories(tw_itest PUBLIC ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/src)
file(GLOB TW_ITESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/integration/itest_*.c)
foreach(src ${TW_ITESTS})
  get_filename_component(name ${src} NAME_WE)
  if(name STREQUAL "itest_concurrent")
    # Its client side is multi-threaded: also run under ThreadSanitizer.
    tw_add_test(${name} ${src} TIMEOUT 120 LABELS integration tsan LIBS tw_itest)
  else()
    tw_add_test(${name} ${src} TIMEOUT 120 LABELS integration LIBS tw_itest)
  endif()
  add_dependencies(${name} tensorwired)
endforeach()

# libFuzzer target for a whole server session (fuzz/server/, built only with
# -DTW_FUZZ=ON; scripts/run-fuzz.sh runs it with the other targets).
if(TW_FUZZ)
  target_compile_options(tw_server PRIVATE -fsanitize=fuzzer-no-link)
  add_executable(fuzz_server_session ${CMAKE_SOURCE_DIR}/fuzz/server/fuzz_server_session.c)
  target_compile_options(fuzz_server_session PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_server_session PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_server_session PRIVATE tw_server)
  set_target_properties(fuzz_server_session PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
endif()

# RDMA data plane of tensorwired and libtensorwire end to end (src/server/
# xfer_rdma.c and fabric_srv.c, src/client/dp_rdma.c): a real server with --fabric PROVIDER,
# library clients and a raw protocol peer. One executable per provider; each
# skips (77) when its provider cannot be opened here.
# The tcp variant also runs under ThreadSanitizer (server mover thread +
# event loop, client mover thread); shm is left out for the reason given in
# tw_fabric_labels (uninstrumented lock-free queues inside libfabric).
foreach(prov tcp shm)
  tw_fabric_labels(${prov} _labels)
  # 400 s: a hang guard. Under TSan on a busy 2-core machine the tcp
  # variant alone took 105 s of a former 120; beside two CPU burners and
  # `ctest -j2`, 111 s of the former 180.
  tw_add_test(test_rdma_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_rdma.c
              TIMEOUT 400 LABELS ${_labels} LIBS tw_itest)
  target_compile_definitions(test_rdma_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
  add_dependencies(test_rdma_${prov} tensorwired)
endforeach()

# tensorwired --metrics scraped with curl and checked with promtool.
add_test(NAME test_metrics COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/test_metrics.sh)
set_tests_properties(test_metrics PROPERTIES TIMEOUT 60 LABELS integration SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")

# Faults between hosts (tests/faults/): server and client in two network
# namespaces; link cut, tbf, blackhole. Needs root (CI runs as root);
# skips with 77 where namespaces cannot be created. About 45 s.
add_test(NAME test_netns_faults COMMAND sh ${CMAKE_SOURCE_DIR}/tests/faults/test_netns_faults.sh)
set_tests_properties(test_netns_faults PROPERTIES TIMEOUT 300 LABELS "integration;faults"
  SKIP_RETURN_CODE 77 ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
