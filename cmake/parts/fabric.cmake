# RDMA data plane (src/fabric/): integration tests over real libfabric
# providers, one executable per provider (each skips with 77 when its
# provider cannot be opened here), and the benchmark.
#
# Only the tcp variant of the in-process test carries the `tsan` label: with
# shm, two endpoints of one process exchange data through a shared-memory
# queue whose lock-free synchronisation lives inside (uninstrumented)
# libfabric, which ThreadSanitizer reports as a race in the provider's
# memcpy. Our own locking is exercised identically by the tcp variant.
foreach(prov tcp shm)
  set(_labels fabric integration)
  if(prov STREQUAL "tcp")
    list(APPEND _labels tsan)
  endif()
  tw_add_test(test_fabric_rma_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_fabric_rma.c
              TIMEOUT 120 LABELS ${_labels})
  target_compile_definitions(test_fabric_rma_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
  tw_add_test(test_fabric_fork_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_fabric_fork.c
              TIMEOUT 120 LABELS fabric integration)
  target_compile_definitions(test_fabric_fork_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
  tw_add_test(test_fabric_wedge_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_fabric_wedge.c
              TIMEOUT 60 LABELS ${_labels})
  target_compile_definitions(test_fabric_wedge_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
endforeach()

# Benchmark (not a test): raw libfabric loop vs the engine.
# The raw loop (tools/raw_fabric.c) is shared with `tensorwire bench`.
add_executable(bench_fabric ${CMAKE_SOURCE_DIR}/bench/bench_fabric.c
                            ${CMAKE_SOURCE_DIR}/tools/raw_fabric.c)
target_include_directories(bench_fabric PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(bench_fabric PRIVATE tw_core)
set_target_properties(bench_fabric PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

# libfabric loaded by dlopen only (src/fabric/fi_api.h): nothing links it,
# and a machine without it serves inline (skips with 77 without root).
add_test(NAME test_fabric_loader COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/test_fabric_loader.sh)
set_tests_properties(test_fabric_loader PROPERTIES TIMEOUT 60 LABELS "fabric;integration"
  SKIP_RETURN_CODE 77 ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
