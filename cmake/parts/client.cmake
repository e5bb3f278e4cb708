# src/client/: the client integration tests against a real tensorwired
# ($TW_BUILD_DIR/tensorwired; they skip with 77 when it is not built).
# test_client_lib and test_client_concurrent use the public API only and
# link the shared libtensorwire (so src/tensorwire.map is exercised);
# test_client_cancel looks inside the handle and links the internal library.
# Bounded: together well under 90 s.
tw_add_test(test_client_lib ${CMAKE_SOURCE_DIR}/tests/integration/test_client_lib.c
            TIMEOUT 90 LABELS integration PUBLIC_API)
tw_add_test(test_client_concurrent ${CMAKE_SOURCE_DIR}/tests/integration/test_client_concurrent.c
            TIMEOUT 90 LABELS "integration;tsan" PUBLIC_API)
tw_add_test(test_client_cancel ${CMAKE_SOURCE_DIR}/tests/integration/test_client_cancel.c
            TIMEOUT 90 LABELS integration)
# tw_add_fabric_run(NAME EXE PROVIDER PUSH TIMEOUT LABELS): one more CTest
# run of the test executable EXE, named NAME, with TW_TEST_FABRIC=PROVIDER
# and TW_TEST_PUSH=PUSH (never, always) in its environment.
function(tw_add_fabric_run name exe prov push timeout labels)
  add_test(NAME ${name} COMMAND ${exe})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout} LABELS "${labels}" SKIP_RETURN_CODE 77
    ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR};TW_TEST_FABRIC=${prov};TW_TEST_PUSH=${push}")
endfunction()

# The same tests over the RDMA data plane (docs/testing.md): every provider,
# pull and push (--push always on both sides), byte-exact. The concurrent one
# stays out of TSan there (the plain run covers the client's threads; shm's
# lock-free queues are uninstrumented, tw_fabric_labels in CMakeLists.txt).
foreach(prov tcp shm)
  foreach(mode pull push)
    if(mode STREQUAL "push")
      set(_push always)
    else()
      set(_push never)
    endif()
    # 300 s: a hang guard, not a speed check. Beside two CPU burners and
    # `ctest -j2` on 2 cores test_client_lib_shm_pull took 87 s of the
    # former 120 (it takes about 10 s on a quiet host).
    foreach(t test_client_lib test_client_concurrent test_client_cancel)
      tw_add_fabric_run(${t}_${prov}_${mode} ${t} ${prov} ${_push} 300 "integration;fabric")
    endforeach()
  endforeach()
endforeach()
foreach(t test_client_lib test_client_concurrent test_client_cancel)
  add_dependencies(${t} tensorwired)
endforeach()

# GPU tensors end to end (issue 11): every direction between host and
# cuda:0 memory, inline and over RDMA tcp / shm. Skips (77) without a CUDA
# device; TW_TEST_BIG=1 adds 1 GiB, 4 GiB and the 40,960-block batch.
tw_add_test(test_gpu_staging ${CMAKE_SOURCE_DIR}/tests/integration/test_gpu_staging.c
            TIMEOUT 600 LABELS "integration;gpu" PUBLIC_API)
# A CUDA copy failing mid-transfer on a real GPU, client and server side.
tw_add_test(test_gpu_inject ${CMAKE_SOURCE_DIR}/tests/integration/test_gpu_inject.c
            TIMEOUT 600 LABELS "integration;gpu")
foreach(t test_gpu_staging test_gpu_inject)
  foreach(prov tcp shm)
    tw_add_fabric_run(${t}_${prov} ${t} ${prov} never 600 "integration;fabric;gpu")
  endforeach()
endforeach()

# The same over shm with the client's push policy auto (issue 12): where a
# libfabric registers CUDA memory (admitted), gets into the client's GPU
# and puts from it are gdr (no staging); elsewhere they stage.
add_test(NAME test_gpu_staging_shm_auto COMMAND test_gpu_staging)
set_tests_properties(test_gpu_staging_shm_auto PROPERTIES TIMEOUT 600
  LABELS "integration;fabric;gpu" SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR};TW_TEST_FABRIC=shm;TW_TEST_PUSH=auto")

# The client's staging planes with a fake CUDA memory kind (no GPU needed):
# inline and over RDMA tcp / shm.
tw_add_test(test_client_staging ${CMAKE_SOURCE_DIR}/tests/integration/test_client_staging.c
            TIMEOUT 120 LABELS integration)
foreach(prov tcp shm)
  tw_add_fabric_run(test_client_staging_${prov} test_client_staging ${prov} never 120
                    "integration;fabric")
endforeach()

# Bit 5 (a source that registers before its bytes are in place): the
# server announces every RDMA get of a host tensor in parts
# (TW_TEST_PROGRESSIVE_CHUNKS, test only), so the client's reads that
# follow RDMA_AVAILABLE run without a GPU: the plain pull (test_client_lib:
# every size, batches) and the pipelined pull into "device" memory
# (test_client_staging's fake CUDA kind, chunk +-1 and odd sizes).
foreach(t test_client_lib test_client_staging)
  add_test(NAME ${t}_tcp_progressive COMMAND ${t})
  set_tests_properties(${t}_tcp_progressive PROPERTIES TIMEOUT 600
    LABELS "integration;fabric" SKIP_RETURN_CODE 77
    ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR};TW_TEST_FABRIC=tcp;TW_TEST_PUSH=never;TW_TEST_PROGRESSIVE_CHUNKS=5")
endforeach()

# The client's GPUDirect rows (issue 12) with a fake CUDA kind and a
# stand-in verdict (no GPU needed): gdr push get, gdr put, refused ->
# staging with the reason, flush order and failure, inline answer ->
# staging. Over RDMA tcp / shm only (exits 77 without a fabric).
tw_add_test(test_client_gdr ${CMAKE_SOURCE_DIR}/tests/integration/test_client_gdr.c
            TIMEOUT 120 LABELS integration)
set_tests_properties(test_client_gdr PROPERTIES SKIP_RETURN_CODE 77)
foreach(prov tcp shm)
  add_test(NAME test_client_gdr_${prov} COMMAND test_client_gdr)
  set_tests_properties(test_client_gdr_${prov} PROPERTIES TIMEOUT 120
    LABELS "integration;fabric" SKIP_RETURN_CODE 77
    ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR};TW_TEST_FABRIC=${prov};TW_TEST_PUSH=auto")
endforeach()
add_dependencies(test_client_gdr tensorwired)

# The GPU tests end to end without a GPU (CI): a test double of the CUDA
# driver (tests/fakecuda: host memory, lazily run streams, no GPUDirect)
# built as libcuda.so.1 in its own directory, which LD_LIBRARY_PATH puts
# before any real driver, for the client and the tensorwired it starts.
# So the staging planes of both sides, and the server's queued copies, run
# in every CI build; the real runs stay on the GPU machine. Every event
# answers NOT_READY three times before its copies run, so a copy still
# running is met where code must not wait for it.
add_library(fakecuda SHARED ${CMAKE_SOURCE_DIR}/tests/fakecuda/fake_libcuda.c)
target_include_directories(fakecuda PRIVATE ${CMAKE_SOURCE_DIR}/src)
set_target_properties(fakecuda PROPERTIES OUTPUT_NAME cuda SOVERSION 1 C_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fakecuda)
target_link_libraries(fakecuda PRIVATE Threads::Threads)
foreach(t test_gpu_staging test_gpu_inject)
  add_dependencies(${t} fakecuda)
  foreach(prov none tcp shm)
    set(_n ${t}_fakecuda)
    if(NOT prov STREQUAL "none")
      set(_n ${t}_fakecuda_${prov})
    endif()
    # Over tcp the server's pipelined put also gets its two reads'
    # completions in reverse order (TW_TEST_REORDER_READS, xfer_staged.c),
    # as a busy machine sometimes delivers them; shm keeps their order.
    set(_reorder 0)
    if(prov STREQUAL "tcp")
      set(_reorder 1)
    endif()
    add_test(NAME ${_n} COMMAND ${t})
    set_tests_properties(${_n} PROPERTIES TIMEOUT 600 LABELS "integration;fakecuda"
      SKIP_RETURN_CODE 77
      ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR};TW_TEST_FABRIC=$<$<NOT:$<STREQUAL:${prov},none>>:${prov}>;TW_TEST_PUSH=never;LD_LIBRARY_PATH=${CMAKE_BINARY_DIR}/fakecuda;TW_FAKE_CUDA_NOT_READY=3;TW_TEST_REORDER_READS=${_reorder}")
  endforeach()
endforeach()
