# GPU building blocks (src/gpu, src/mem/staging.c): the staging benchmark
# (not a test; docs/performance.md). The GPU tests are ordinary unit tests
# that exit 77 (SKIPPED) without a CUDA driver or device.
add_executable(bench_staging ${CMAKE_SOURCE_DIR}/bench/bench_staging.c)
target_link_libraries(bench_staging PRIVATE tw_core)
set_target_properties(bench_staging PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
