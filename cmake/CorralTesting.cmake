# corral_test(NAME name SOURCES ... DEPS ... [LABELS label]): one GoogleTest binary, registered per test case.
# One label per binary (unit, integration or adversarial): gtest_discover_tests cannot pass a list through.
function(corral_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  corral_warnings(${T_NAME})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gmock_main)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set(_labels unit)
  if(T_LABELS)
    set(_labels ${T_LABELS})
  endif()
  gtest_discover_tests(${T_NAME} PROPERTIES LABELS "${_labels}" DISCOVERY_TIMEOUT 30)
endfunction()
