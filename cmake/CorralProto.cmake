# corral_proto_library(NAME n ALIAS a ROOT dir PROTOS files... [STUBS_APART files...]): C++ messages + gRPC stubs
# in one static library of their own, so services link generated code instead of recompiling it. No
# warnings-as-errors here. STUBS_APART names the .proto files (of PROTOS) so large that their messages and their
# stubs are two units, not one: together they would be the slowest unit of the build.
function(corral_proto_library)
  cmake_parse_arguments(P "" "NAME;ALIAS;ROOT" "PROTOS;STUBS_APART" ${ARGN})
  set(_out ${CMAKE_BINARY_DIR}/gen)
  file(MAKE_DIRECTORY ${_out})
  add_library(${P_NAME} STATIC ${P_PROTOS})
  add_library(${P_ALIAS} ALIAS ${P_NAME})
  target_link_libraries(${P_NAME} PUBLIC protobuf::libprotobuf gRPC::grpc++)
  target_include_directories(${P_NAME} SYSTEM PUBLIC ${_out})
  protobuf_generate(TARGET ${P_NAME} LANGUAGE cpp IMPORT_DIRS ${P_ROOT} PROTOC_OUT_DIR ${_out})
  protobuf_generate(TARGET ${P_NAME} LANGUAGE grpc IMPORT_DIRS ${P_ROOT} PROTOC_OUT_DIR ${_out}
    GENERATE_EXTENSIONS .grpc.pb.h .grpc.pb.cc
    PLUGIN protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>)
  # In a unity build, a .proto's messages and its stubs share a unit; two .proto files never do (protoc gives each
  # file the same private names).
  set_target_properties(${P_NAME} PROPERTIES UNITY_BUILD_MODE GROUP)
  get_target_property(_sources ${P_NAME} SOURCES)
  foreach(_source IN LISTS _sources)
    if(_source MATCHES "\\.pb\\.cc$")
      file(RELATIVE_PATH _group ${_out} ${_source})
      string(REGEX REPLACE "(\\.grpc)?\\.pb\\.cc$" "" _proto ${_group})
      set(_group ${_proto})
      if("${_proto}.proto" IN_LIST P_STUBS_APART AND _source MATCHES "\\.grpc\\.pb\\.cc$")
        set(_group ${_proto}_grpc)
      endif()
      string(REPLACE "/" "_" _group ${_group})
      set_source_files_properties(${_source} PROPERTIES UNITY_GROUP ${_group})
    endif()
  endforeach()
endfunction()
