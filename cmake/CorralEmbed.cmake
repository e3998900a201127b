# corral_embed_files(TARGET t SYMBOL s BASE dir FILES f...): compiles the files into `t` as
# `const corral::http::EmbeddedFile s[]` (path relative to BASE, bytes), ended by {nullptr, {}}. Regenerated when a
# file changes, so a binary serves its web assets with no file next to it.
set(CORRAL_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_files.cmake)
function(corral_embed_files)
  cmake_parse_arguments(E "" "TARGET;SYMBOL;BASE" "FILES" ${ARGN})
  set(_out ${CMAKE_CURRENT_BINARY_DIR}/${E_SYMBOL}.cc)
  set(_deps)
  foreach(_f IN LISTS E_FILES)
    list(APPEND _deps ${E_BASE}/${_f})
  endforeach()
  string(REPLACE ";" "|" _files "${E_FILES}")
  add_custom_command(OUTPUT ${_out}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${_out} -DSYMBOL=${E_SYMBOL} -DBASE=${E_BASE} -DFILES=${_files}
            -P ${CORRAL_EMBED_SCRIPT}
    DEPENDS ${_deps} ${CORRAL_EMBED_SCRIPT}
    COMMENT "Embedding ${E_SYMBOL}"
    VERBATIM)
  target_sources(${E_TARGET} PRIVATE ${_out})
  # Bytes only: loading the precompiled header would cost more than the unit, and a batch gains nothing.
  set_source_files_properties(${_out} PROPERTIES SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()
