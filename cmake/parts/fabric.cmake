# src/fabric/: integration tests over real libfabric providers, one
# executable per provider (each skips with 77 when its provider cannot be
# opened here): RMA, fork safety, wedged rails, and the registration cache
# in front of the data plane (mrcache.c).
#
# Only the tcp variants carry the `tsan` label (tw_fabric_labels in
# CMakeLists.txt says why), and not the fork test.
foreach(prov tcp shm)
  tw_fabric_labels(${prov} _labels)
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

# libfabric loaded by dlopen only (src/fabric/fi_api.h): nothing links it,
# and a machine without it serves inline (skips with 77 without root).
add_test(NAME test_fabric_loader COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/test_fabric_loader.sh)
set_tests_properties(test_fabric_loader PROPERTIES TIMEOUT 60 LABELS "fabric;integration"
  SKIP_RETURN_CODE 77 ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
