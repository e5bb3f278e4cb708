# src/fabric/: integration tests over real libfabric providers, one
# executable per provider (each skips with 77 when its provider cannot be
# opened here): RMA, fork safety, wedged rails, and the registration cache
# in front of the data plane (mrcache.c).
#
# Only the tcp variants carry the `tsan` label (not the fork test): with
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
  tw_add_test(test_mrcache_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_mrcache.c
              TIMEOUT 120 LABELS ${_labels} regcache)
  target_compile_definitions(test_mrcache_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
endforeach()
