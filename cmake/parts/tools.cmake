# tools/: the tensorwire CLI. It uses the library the way users do: the
# shared libtensorwire through include/tensorwire/ only (no src/ on its
# include path). Its .npy reader/writer (tools/npy.c) lives here because
# only the CLI uses it. `tensorwire bench`'s raw libfabric baseline
# (tools/raw_fabric.c) talks to libfabric directly, on purpose. The list of
# libfabric provider names (src/fabric/provider_names.c: pure, no library
# state) is compiled in, so --fabric typos are refused exactly as
# tensorwired refuses them.
add_executable(tensorwire_cli ${CMAKE_SOURCE_DIR}/tools/tensorwire.c
                              ${CMAKE_SOURCE_DIR}/tools/bench.c
                              ${CMAKE_SOURCE_DIR}/tools/doctor.c
                              ${CMAKE_SOURCE_DIR}/tools/npy.c
                              ${CMAKE_SOURCE_DIR}/tools/raw_loop.c
                              ${CMAKE_SOURCE_DIR}/tools/raw_fabric.c
                              ${CMAKE_SOURCE_DIR}/tools/cli_text.c
                              ${CMAKE_SOURCE_DIR}/tools/progress.c
                              ${CMAKE_SOURCE_DIR}/src/fabric/provider_names.c
                              ${CMAKE_SOURCE_DIR}/src/fabric/fi_load.c)
# raw_fabric.c reaches libfabric through the library's dlopen loader (its
# own copy: the library's is hidden), so the CLI links no libfabric and
# `tensorwire --help` does not load it.
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/fabric/fi_load.c TARGET_DIRECTORY tensorwire_cli
                            PROPERTIES INCLUDE_DIRECTORIES ${CMAKE_SOURCE_DIR}/src)
target_include_directories(tensorwire_cli SYSTEM PRIVATE ${FABRIC_INCLUDE_DIRS})
set_target_properties(tensorwire_cli PROPERTIES OUTPUT_NAME tensorwire
                      INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
target_include_directories(tensorwire_cli PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(tensorwire_cli PRIVATE tensorwire Threads::Threads ${CMAKE_DL_LIBS})

# The .npy unit test (tests/unit/test_npy.c) builds the CLI's parser.
target_sources(test_npy PRIVATE ${CMAKE_SOURCE_DIR}/tools/npy.c)
target_include_directories(test_npy PRIVATE ${CMAKE_SOURCE_DIR})

# The raw libfabric baseline moves the bytes it claims to, per provider
# (skips with 77 when the provider cannot be opened here).
foreach(prov tcp shm)
  tw_add_test(test_raw_fabric_${prov} ${CMAKE_SOURCE_DIR}/tests/integration/test_raw_fabric.c
              TIMEOUT 60 LABELS fabric integration)
  target_sources(test_raw_fabric_${prov} PRIVATE ${CMAKE_SOURCE_DIR}/tools/raw_fabric.c)
  target_include_directories(test_raw_fabric_${prov} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(test_raw_fabric_${prov} PRIVATE TW_TEST_PROVIDER="${prov}")
endforeach()

add_test(NAME test_cli COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/test_cli.sh)
# 600 s: a hang guard. About 17 s on a quiet host; beside two CPU burners
# and `ctest -j2` on 2 cores it took 140-164 s and once passed 180.
set_tests_properties(test_cli PROPERTIES TIMEOUT 600 LABELS integration SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")

# tensorwire get: atomic replacement and bounded memory (test_cli_get.sh);
# the same on a full filesystem, in a private tmpfs (test_cli_fullfs.sh, root
# only: skipped otherwise); the progress line on a pseudo-terminal
# (test_cli_progress.py).
foreach(t test_cli_get test_cli_fullfs)
  add_test(NAME ${t} COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/${t}.sh)
  set_tests_properties(${t} PROPERTIES TIMEOUT 90 LABELS integration SKIP_RETURN_CODE 77
    ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
endforeach()
add_test(NAME test_cli_progress COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/integration/test_cli_progress.py)
set_tests_properties(test_cli_progress PROPERTIES TIMEOUT 90 LABELS integration SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")

# tensorwire doctor (GPUDirect admission report): text and JSON on this
# machine and against a sysfs fixture tree.
add_test(NAME test_doctor COMMAND sh ${CMAKE_SOURCE_DIR}/tests/integration/test_doctor.sh)
set_tests_properties(test_doctor PROPERTIES TIMEOUT 60 LABELS integration SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR}")
