# Registration cache: concurrency stress (also under ThreadSanitizer) and the
# lookup/registration benchmark (not a test: run it by hand, see
# docs/performance.md).
tw_add_test(test_regcache_stress ${CMAKE_SOURCE_DIR}/tests/regcache/test_regcache_stress.c
            TIMEOUT 60 LABELS tsan regcache)

add_executable(bench_regcache ${CMAKE_SOURCE_DIR}/bench/bench_regcache.c)
target_link_libraries(bench_regcache PRIVATE tw_core)
target_include_directories(bench_regcache PRIVATE ${CMAKE_SOURCE_DIR}/tests)
set_target_properties(bench_regcache PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
