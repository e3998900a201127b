# corral_test(NAME name SOURCES ... DEPS ... [LABELS label]): one GoogleTest binary, registered per test case.
# Calling it again with the same NAME adds SOURCES and DEPS to that binary: the libraries' unit tests share one
# (libs_test), so their common headers are compiled and linked once, not once per library.
# One label per binary (unit, integration or adversarial): gtest_discover_tests cannot pass a list through.
# A test's own units are compiled at -O0 with the test precompiled header (what they call in the libraries stays
# optimized): a test runs for seconds, its compile took half a minute at -O2.
function(corral_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;DEPS;LABELS" ${ARGN})
  if(TARGET ${T_NAME})
    target_sources(${T_NAME} PRIVATE ${T_SOURCES})
    target_link_libraries(${T_NAME} PRIVATE ${T_DEPS})
    return()
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  corral_warnings(${T_NAME})
  target_compile_options(${T_NAME} PRIVATE -O0)
  corral_use_pch(${T_NAME} TEST)
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gmock_main)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set(_labels unit)
  if(T_LABELS)
    set(_labels ${T_LABELS})
  endif()
  gtest_discover_tests(${T_NAME} PROPERTIES LABELS "${_labels}" DISCOVERY_TIMEOUT 30)
endfunction()

# corral_integration_test(NAME name SOURCES ... [DEPS ...] [LABELS label] [BINARIES ...] [NEEDS ...]): a test
# binary that starts real Corral binaries. Each of BINARIES is built first and its path compiled in as a macro
# named after it (corral-sandbox-host → CORRAL_SANDBOX_HOST; the CLI `corral` → CORRAL_CLI); NEEDS are built first
# too (binaries the test starts through another, e.g. `corral up`). Label `integration` unless given.
function(corral_integration_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;DEPS;LABELS;BINARIES;NEEDS" ${ARGN})
  set(_labels integration)
  if(T_LABELS)
    set(_labels ${T_LABELS})
  endif()
  corral_test(NAME ${T_NAME} SOURCES ${T_SOURCES} DEPS corral::test_support corral::core_testing ${T_DEPS}
              LABELS ${_labels})
  foreach(_bin IN LISTS T_BINARIES)
    if(_bin STREQUAL "corral")
      set(_macro CORRAL_CLI)
    else()
      string(TOUPPER ${_bin} _macro)
      string(REPLACE "-" "_" _macro ${_macro})
    endif()
    target_compile_definitions(${T_NAME} PRIVATE ${_macro}="$<TARGET_FILE:${_bin}>")
  endforeach()
  if(T_BINARIES OR T_NEEDS)
    add_dependencies(${T_NAME} ${T_BINARIES} ${T_NEEDS})
  endif()
endfunction()
