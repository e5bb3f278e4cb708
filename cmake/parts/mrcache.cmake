# Registration cache in front of the data plane (src/fabric/mrcache.c):
# integration tests over real providers (skip with 77 when unavailable) and
# the 64 MiB transfer benchmark (not a test: see docs/performance.md).
# Only the tcp variant runs under ThreadSanitizer (shm's in-process
# lock-free queue is uninstrumented libfabric code; see fabric.cmake).
foreach(prov tcp shm)
  set(_labels fabric integration regcache)
  if(prov STREQUAL "tcp")
    list(APPEND _labels tsan)
  endif()
  tw_add_test(test_mrcache_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_mrcache.c
              TIMEOUT 120 LABELS ${_labels})
  target_compile_definitions(test_mrcache_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
endforeach()

add_executable(bench_mrcache ${CMAKE_SOURCE_DIR}/bench/bench_mrcache.c)
target_link_libraries(bench_mrcache PRIVATE tw_core)
set_target_properties(bench_mrcache PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
