# RDMA data plane of tensorwired and libtensorwire end to end (src/server/
# xfer_rdma.c, src/client/dp_rdma.c): a real server with --fabric PROVIDER,
# library clients and a raw protocol peer. One executable per provider; each
# skips (77) when its provider cannot be opened here.
foreach(prov tcp shm)
  tw_add_test(test_rdma_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_rdma.c
              TIMEOUT 120 LABELS fabric integration LIBS tw_itest)
  target_compile_definitions(test_rdma_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
  add_dependencies(test_rdma_${prov} tensorwired)
endforeach()
