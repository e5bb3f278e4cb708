# tensorwired: the daemon (src/server/, not part of the library) and its
# integration tests (tests/integration/, label "integration").
file(GLOB TW_SERVER_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/*.c)
add_executable(tensorwired ${TW_SERVER_SOURCES})
target_link_libraries(tensorwired PRIVATE tw_core)
set_target_properties(tensorwired PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
