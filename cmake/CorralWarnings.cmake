# corral_warnings(target): strict warnings for Corral's own code; generated code never gets these.
function(corral_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough
    # Designated initializers that leave fields at their defaults are the intended idiom.
    -Wno-missing-field-initializers)
  if(CORRAL_SANITIZE)
    # Sanitizer instrumentation makes GCC 12 report uninitialized-use false positives inside libstdc++.
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
  endif()
  if(CORRAL_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # In a batch every file is a header of the unit, so GCC takes a coroutine frame that holds a file's private
    # types for a header type with private members (-Wsubobject-linkage).
    target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
  endif()
  if(CORRAL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
