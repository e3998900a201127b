# Precompiled headers: the big third-party headers (Abseil, Asio/Beast, Boost.JSON, gRPC, protobuf, spdlog) parsed
# once per build instead of in every unit. Two flavours, because a precompiled header is valid only with the flags
# it was made with: one for product code (-O2), one for test executables (-O0, plus GoogleTest and GoogleMock).
# GCC loads the whole header (about 300 MB) into every unit that uses it, 1.5 to 3 s, so light targets (libs/core,
# the Linux modules, the pure tables) go without: a folder opts in with corral_precompile_directory() after its
# targets, naming its light ones after EXCEPT (scripts/build-profile OLD NEW shows which lost).

set(_corral_pch_common
  <algorithm> <atomic> <chrono> <cstdint> <deque> <functional> <map> <memory> <mutex> <optional> <set> <string>
  <thread> <unordered_map> <utility> <variant> <vector>
  <absl/container/flat_hash_map.h> <absl/status/status.h> <absl/status/statusor.h> <absl/strings/str_cat.h>
  <absl/strings/str_format.h> <absl/strings/string_view.h> <absl/synchronization/mutex.h> <absl/time/time.h>
  <boost/asio/as_tuple.hpp> <boost/asio/awaitable.hpp> <boost/asio/co_spawn.hpp> <boost/asio/io_context.hpp>
  <boost/asio/ip/tcp.hpp> <boost/asio/post.hpp> <boost/asio/steady_timer.hpp> <boost/asio/use_awaitable.hpp>
  <boost/beast/core/tcp_stream.hpp> <boost/beast/http/message.hpp> <boost/beast/http/string_body.hpp>
  <boost/json.hpp> <google/protobuf/message.h> <google/protobuf/util/json_util.h> <grpcpp/grpcpp.h>
  <spdlog/spdlog.h>)

# The hosts: each compiles its header once; every user reuses it (REUSE_FROM), so they share the host's flags
# (corral_warnings too: -Wpedantic changes the predefined macros).
foreach(_host corral_pch corral_test_pch)
  add_library(${_host} STATIC ${CMAKE_CURRENT_LIST_DIR}/pch_host.cc)
  target_link_libraries(${_host} PRIVATE absl::statusor absl::strings absl::synchronization absl::time
    protobuf::libprotobuf gRPC::grpc++ spdlog::spdlog)
  corral_warnings(${_host})
endforeach()
target_precompile_headers(corral_pch PRIVATE ${_corral_pch_common})
target_link_libraries(corral_test_pch PRIVATE GTest::gmock)
target_compile_options(corral_test_pch PRIVATE -O0)
target_precompile_headers(corral_test_pch PRIVATE ${_corral_pch_common} <gmock/gmock.h> <gtest/gtest.h>)

# corral_use_pch(target [TEST]): compile `target` with the product (or the test) precompiled header. The header
# brings spdlog's and Asio's headers, so it brings spdlog's definitions (a unit whose macros differ from the
# header's cannot use it) and the library Asio is compiled in (its headers' static initializers call into it).
# A TEST target links GoogleMock itself (corral_test) and is compiled at -O0 like the host.
function(corral_use_pch target)
  if(ARGN STREQUAL "TEST")
    target_precompile_headers(${target} REUSE_FROM corral_test_pch)
  else()
    target_precompile_headers(${target} REUSE_FROM corral_pch)
  endif()
  target_compile_definitions(${target} PRIVATE $<TARGET_PROPERTY:spdlog::spdlog,INTERFACE_COMPILE_DEFINITIONS>)
  target_link_libraries(${target} PRIVATE corral::async)
endfunction()

# corral_precompile_directory([EXCEPT targets...]): every library and executable of the calling folder that has
# C++ sources and no header of its own yet uses the product header (test executables already have theirs:
# corral_test), but those named after EXCEPT (light ones, which would pay more to load it than they save).
function(corral_precompile_directory)
  cmake_parse_arguments(P "" "" "EXCEPT" ${ARGN})
  get_property(_targets DIRECTORY PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_t IN LISTS _targets)
    if(_t IN_LIST P_EXCEPT)
      continue()
    endif()
    get_target_property(_type ${_t} TYPE)
    get_target_property(_pch ${_t} PRECOMPILE_HEADERS_REUSE_FROM)
    get_target_property(_sources ${_t} SOURCES)
    if(NOT _type MATCHES "^(STATIC_LIBRARY|EXECUTABLE)$" OR _pch OR _t MATCHES "fuzzer$"
       OR NOT _sources MATCHES "\\.cc")
      continue()
    endif()
    corral_use_pch(${_t})
  endforeach()
endfunction()
