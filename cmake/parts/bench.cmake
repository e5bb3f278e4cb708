# bench/: benchmarks, not tests (docs/performance.md says how to run each).
# Micro-benchmarks of internal modules link the internal library (LIBS
# tw_core); the end to end ones use the public API through the shared
# libtensorwire (LIBS tensorwire).
# tw_add_bench(NAME SOURCE... [LIBS lib...]): bench/NAME in the build tree.
function(tw_add_bench name)
  cmake_parse_arguments(B "" "" "LIBS" ${ARGN})
  add_executable(${name} ${B_UNPARSED_ARGUMENTS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
  if(B_LIBS)
    target_link_libraries(${name} PRIVATE ${B_LIBS})
  endif()
  # tests/tw_fill.h: the test bytes shared with the tests (bench_util.h).
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
endfunction()

# Raw libfabric loop vs the engine; the raw loop (tools/raw_fabric.c) is
# shared with `tensorwire bench`.
tw_add_bench(bench_fabric ${CMAKE_SOURCE_DIR}/bench/bench_fabric.c
             ${CMAKE_SOURCE_DIR}/tools/raw_fabric.c LIBS tw_core)
target_include_directories(bench_fabric PRIVATE ${CMAKE_SOURCE_DIR})

# Registration cache in front of the data plane: 64 MiB transfers.
tw_add_bench(bench_mrcache ${CMAKE_SOURCE_DIR}/bench/bench_mrcache.c LIBS tw_core)

# Codec micro-benchmark.
tw_add_bench(bench_proto ${CMAKE_SOURCE_DIR}/bench/bench_proto.c LIBS tw_core)

# Registration cache lookups and registrations.
tw_add_bench(bench_regcache ${CMAKE_SOURCE_DIR}/bench/bench_regcache.c LIBS tw_core)

# Inline vs RDMA put/get through a running server ("RDMA data plane end to
# end"): public API only, so it links libtensorwire.so.
tw_add_bench(bench_rdma_e2e ${CMAKE_SOURCE_DIR}/bench/bench_rdma_e2e.c LIBS tensorwire)

# GPU staging pipeline vs plain pinned cuMemcpy (src/mem/staging.c); the GPU
# tests are ordinary unit tests that exit 77 (SKIPPED) without a CUDA driver
# or device.
tw_add_bench(bench_staging ${CMAKE_SOURCE_DIR}/bench/bench_staging.c LIBS tw_core)

# KV-cache and weight-sync workloads against one tensor of the same bytes
# (bench/kv_bench.sh runs it on every plane): public API only.
tw_add_bench(bench_kv ${CMAKE_SOURCE_DIR}/bench/bench_kv.c LIBS tensorwire)

# Soak (not a test): N clients x T seconds of mixed self-checking operations
# against a running tensorwired (bench/soak.sh starts one).
tw_add_bench(bench_soak ${CMAKE_SOURCE_DIR}/bench/bench_soak.c LIBS tw_core)

# GPUDirect admission: a cached verdict lookup vs deciding from facts.
tw_add_bench(bench_gdr_lookup ${CMAKE_SOURCE_DIR}/bench/bench_gdr_lookup.c LIBS tw_core)

# GPUDirect put/get of a server tensor on a GPU vs a raw libfabric RMA loop
# on CUDA memory (same provider and size).
tw_add_bench(bench_gdr ${CMAKE_SOURCE_DIR}/bench/bench_gdr.c ${CMAKE_SOURCE_DIR}/tools/raw_fabric.c
             LIBS tw_core)
target_include_directories(bench_gdr PRIVATE ${CMAKE_SOURCE_DIR})

# GPUDirect into and out of the client's own GPU memory vs staging and a raw
# fi_write loop into CUDA memory (same provider and size), one run.
tw_add_bench(bench_gdr_client ${CMAKE_SOURCE_DIR}/bench/bench_gdr_client.c
             ${CMAKE_SOURCE_DIR}/tools/raw_fabric.c LIBS tw_core)
target_include_directories(bench_gdr_client PRIVATE ${CMAKE_SOURCE_DIR})
