# Benchmark (not a test): the KV-cache and weight-sync workloads through a
# running tensorwired, public API only (bench/kv_bench.sh, docs/performance.md).
add_executable(bench_kv ${CMAKE_SOURCE_DIR}/bench/bench_kv.c)
target_link_libraries(bench_kv PRIVATE tensorwire)
set_target_properties(bench_kv PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
