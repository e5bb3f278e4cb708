# tensorwired: the daemon (src/server/, not part of the library) and its
# integration tests (tests/integration/, label "integration").
file(GLOB TW_SERVER_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/*.c)
add_executable(tensorwired ${TW_SERVER_SOURCES})
target_link_libraries(tensorwired PRIVATE tw_core)
set_target_properties(tensorwired PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

# Integration tests: each starts its own tensorwired on an ephemeral port.
add_library(tw_itest STATIC ${CMAKE_SOURCE_DIR}/tests/integration/itest.c
                            ${CMAKE_SOURCE_DIR}/src/server/auth.c)
target_link_libraries(tw_itest PUBLIC tw_core)
target_include_directories(tw_itest PUBLIC ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/src)
file(GLOB TW_ITESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/integration/itest_*.c)
foreach(src ${TW_ITESTS})
  get_filename_component(name ${src} NAME_WE)
  tw_add_test(${name} ${src} TIMEOUT 120 LABELS integration LIBS tw_itest)
  add_dependencies(${name} tensorwired)
endforeach()
