# Python area: the tensorwire package (python/), a CPython extension over the
# shared libtensorwire, built with setuptools into BUILD/python (never into
# the source tree) and tested with pytest against a real tensorwired.
#
# The interpreter is Debian's /usr/bin/python3 when present (its dist-packages
# hold python3-numpy/-torch/-pytest; a pyenv python3 first on PATH would not
# see them); -DTW_PYTHON=... picks another. Without Python.h the package is
# not built and the pytest test skips (exit 77).
if(NOT TW_PYTHON)
  if(EXISTS /usr/bin/python3)
    set(TW_PYTHON /usr/bin/python3)
  else()
    find_program(TW_PYTHON python3)
  endif()
endif()
set(TW_PYTHON "${TW_PYTHON}" CACHE FILEPATH "Python interpreter for the tensorwire package")

set(_tw_py_ok FALSE)
if(TW_PYTHON AND NOT TW_SANITIZE AND NOT TW_TSAN AND NOT TW_FUZZ)
  execute_process(COMMAND ${TW_PYTHON} -c
    "import sysconfig, os, setuptools; print(os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"
    OUTPUT_VARIABLE _tw_py_has_dev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_tw_py_has_dev STREQUAL "True")
    set(_tw_py_ok TRUE)
  endif()
endif()

if(_tw_py_ok)
  file(GLOB _tw_py_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/src/*.c
       ${CMAKE_SOURCE_DIR}/python/tensorwire/*.py ${CMAKE_SOURCE_DIR}/python/tensorwire/*.pyi
       ${CMAKE_SOURCE_DIR}/include/tensorwire/*.h)
  set(_tw_py_stamp ${CMAKE_BINARY_DIR}/python/.built)
  add_custom_command(OUTPUT ${_tw_py_stamp}
    COMMAND ${CMAKE_COMMAND} -E env TW_LIB_DIR=$<TARGET_FILE_DIR:tensorwire>
            TW_INCLUDE_DIR=${CMAKE_SOURCE_DIR}/include
            ${TW_PYTHON} setup.py -q build --force --build-lib ${CMAKE_BINARY_DIR}/python
            --build-temp ${CMAKE_BINARY_DIR}/python-temp --build-base ${CMAKE_BINARY_DIR}/python-temp
    COMMAND ${CMAKE_COMMAND} -E touch ${_tw_py_stamp}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/python
    DEPENDS tensorwire ${_tw_py_sources} ${CMAKE_SOURCE_DIR}/python/setup.py
    COMMENT "Building the tensorwire Python package into ${CMAKE_BINARY_DIR}/python"
    VERBATIM)
  add_custom_target(python ALL DEPENDS ${_tw_py_stamp})
else()
  message(STATUS "tensorwire Python package: not built (no Python.h/setuptools for '${TW_PYTHON}' or a sanitizer build)")
endif()

add_test(NAME test_python COMMAND sh ${CMAKE_SOURCE_DIR}/python/tests/run.sh)
set_tests_properties(test_python PROPERTIES TIMEOUT 600 LABELS "integration;python"
  SKIP_RETURN_CODE 77
  ENVIRONMENT "TW_SOURCE_DIR=${CMAKE_SOURCE_DIR};TW_BUILD_DIR=${CMAKE_BINARY_DIR};TW_PYTHON=${TW_PYTHON}")

# The C half of bench/bench_python.py's per-call comparison (not a test).
add_executable(bench_get_loop ${CMAKE_SOURCE_DIR}/bench/bench_get_loop.c)
target_link_libraries(bench_get_loop PRIVATE tensorwire)
set_target_properties(bench_get_loop PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

# The C half of its stacked get_many comparison: one tw_batch_get of
# distinct tensors into the rows of one buffer (not a test).
add_executable(bench_batch_get ${CMAKE_SOURCE_DIR}/bench/bench_batch_get.c)
target_link_libraries(bench_batch_get PRIVATE tensorwire)
set_target_properties(bench_batch_get PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
