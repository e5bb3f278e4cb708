# Client area: the tensorwire CLI and the client integration tests.
add_executable(tensorwire_cli ${CMAKE_SOURCE_DIR}/tools/tensorwire.c
                              ${CMAKE_SOURCE_DIR}/tools/bench.c
                              ${CMAKE_SOURCE_DIR}/tools/raw_loop.c)
set_target_properties(tensorwire_cli PROPERTIES OUTPUT_NAME tensorwire)
target_include_directories(tensorwire_cli PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(tensorwire_cli PRIVATE tw_core)
