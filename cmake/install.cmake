# Included last by CMakeLists.txt. `make install` (cmake --install; PREFIX and DESTDIR honoured): the shared
# libtensorwire, the public headers, tensorwired and the tensorwire CLI, a
# pkg-config file and a CMake package config (imported target
# tensorwire::tensorwire). test_install checks the installed copy.
include(CMakePackageConfigHelpers)

set(TW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tensorwire)

install(TARGETS tensorwire EXPORT tensorwireTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/tensorwire
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
set_target_properties(tensorwired PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS tensorwired tensorwire_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT tensorwireTargets NAMESPACE tensorwire:: DESTINATION ${TW_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/tensorwireConfig.cmake.in
  ${CMAKE_BINARY_DIR}/tensorwireConfig.cmake INSTALL_DESTINATION ${TW_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/tensorwireConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/tensorwireConfig.cmake
              ${CMAKE_BINARY_DIR}/tensorwireConfigVersion.cmake
        DESTINATION ${TW_CMAKE_DIR})

# Only needed to link libtensorwire statically; it is shipped shared.
# libfabric is not linked: it is loaded with dlopen (src/fabric/fi_api.h).
set(TW_PC_LIBS_PRIVATE "-lcrypto -lpthread")
if(CMAKE_DL_LIBS)
  string(APPEND TW_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")
endif()
# The prefix is found from the .pc file's own place (${pcfiledir}), so the
# file stays right wherever `cmake --install --prefix` and DESTDIR put it.
file(RELATIVE_PATH TW_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" TW_PC_TO_PREFIX "${TW_PC_TO_PREFIX}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/tensorwire.pc.in ${CMAKE_BINARY_DIR}/tensorwire.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/tensorwire.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Installs into a temporary DESTDIR and builds tests/install/consumer.c
# against the installed copy, once with pkg-config and once with
# find_package, then runs both (scripts/check-install.sh). Not under the
# sanitizers: a sanitized libtensorwire cannot be linked by a plain program.
if(NOT TW_SANITIZE AND NOT TW_TSAN AND NOT TW_FUZZ)
  add_test(NAME test_install
           COMMAND sh ${CMAKE_SOURCE_DIR}/scripts/check-install.sh ${CMAKE_BINARY_DIR}
                   ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_install PROPERTIES TIMEOUT 300 LABELS install SKIP_RETURN_CODE 77)
endif()
