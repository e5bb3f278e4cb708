# RDMA data plane of tensorwired and libtensorwire end to end (src/server/
# xfer_rdma.c, src/client/dp_rdma.c): a real server with --fabric PROVIDER,
# library clients and a raw protocol peer. One executable per provider; each
# skips (77) when its provider cannot be opened here.
# The tcp variant also runs under ThreadSanitizer (server mover thread +
# event loop, client mover thread); shm is left out for the reason given in
# fabric.cmake (uninstrumented lock-free queues inside libfabric).
foreach(prov tcp shm)
  set(_labels fabric integration)
  if(prov STREQUAL "tcp")
    list(APPEND _labels tsan)
  endif()
  # 180 s: under TSan on a busy 2-core machine the tcp variant alone took
  # 105 s of the former 120.
  tw_add_test(test_rdma_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_rdma.c
              TIMEOUT 180 LABELS ${_labels} LIBS tw_itest)
  target_compile_definitions(test_rdma_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
  add_dependencies(test_rdma_${prov} tensorwired)
endforeach()

# Benchmark (not a test): inline vs RDMA put/get through a running server,
# public API only (docs/performance.md "RDMA data plane end to end").
add_executable(bench_rdma_e2e ${CMAKE_SOURCE_DIR}/bench/bench_rdma_e2e.c)
target_link_libraries(bench_rdma_e2e PRIVATE tw_core)
set_target_properties(bench_rdma_e2e PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
