# tensorwire bench's raw libfabric baseline (tools/raw_fabric.c): checks that
# the loop moves the bytes it claims to, per provider (skips with 77 when the
# provider cannot be opened here).
foreach(prov tcp shm)
  tw_add_test(test_raw_fabric_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_raw_fabric.c
              TIMEOUT 60 LABELS fabric integration)
  target_sources(test_raw_fabric_${prov} PRIVATE ${CMAKE_SOURCE_DIR}/tools/raw_fabric.c)
  target_include_directories(test_raw_fabric_${prov} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(test_raw_fabric_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
endforeach()
