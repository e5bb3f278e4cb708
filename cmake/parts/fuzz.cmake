# libFuzzer targets: fuzz/fuzz_*.c, built only with -DTW_FUZZ=ON (clang).
if(TW_FUZZ)
  # Coverage feedback must come from the library under test, not only from
  # the fuzz target's own file: instrument tw_core too (no libFuzzer main).
  target_compile_options(tw_core PRIVATE -fsanitize=fuzzer-no-link)
  file(GLOB TW_FUZZ_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/fuzz_*.c)
  foreach(src ${TW_FUZZ_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${name} PRIVATE tw_core)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  endforeach()
endif()
