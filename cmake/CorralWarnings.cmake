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
  if(CORRAL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
