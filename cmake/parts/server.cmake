# tensorwired: the daemon (src/server/, not part of the library), its unit
# tests (tests/server/, label "unit") and integration tests
# (tests/integration/, label "integration").
file(GLOB TW_SERVER_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/*.c)
list(REMOVE_ITEM TW_SERVER_SOURCES ${CMAKE_SOURCE_DIR}/src/server/main.c)
# Everything but main(), so tests can link the server's modules.
add_library(tw_server STATIC ${TW_SERVER_SOURCES})
target_link_libraries(tw_server PUBLIC tw_core)
add_executable(tensorwired ${CMAKE_SOURCE_DIR}/src/server/main.c)
target_link_libraries(tensorwired PRIVATE tw_server)
set_target_properties(tensorwired PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

file(GLOB TW_SERVER_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/server/test_*.c)
foreach(src ${TW_SERVER_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  tw_add_test(${name} ${src} LABELS unit LIBS tw_server)
endforeach()

# Integration tests: each starts its own tensorwired on an ephemeral port.
add_library(tw_itest STATIC ${CMAKE_SOURCE_DIR}/tests/integration/itest.c)
target_link_libraries(tw_itest PUBLIC tw_server)
target_include_directories(tw_itest PUBLIC ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/src)
file(GLOB TW_ITESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/integration/itest_*.c)
foreach(src ${TW_ITESTS})
  get_filename_component(name ${src} NAME_WE)
  tw_add_test(${name} ${src} TIMEOUT 120 LABELS integration LIBS tw_itest)
  add_dependencies(${name} tensorwired)
endforeach()
