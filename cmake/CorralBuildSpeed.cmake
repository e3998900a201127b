# Build-wide settings chosen for compile time (scripts/build-profile measures them; docs/building.md has figures).

# Line tables only (-g1): backtraces, perf and gdb's `bt` keep function, file and line, while the full variable
# locations of -g cost a fifth of a coroutine-heavy unit's compile time and most of the objects' size (the
# scheduler's episode objects: 70 MB with -g, 16 MB with -g1). -DCORRAL_FULL_DEBUG_INFO=ON
# (or a Debug build) restores them for a session in a debugger.
option(CORRAL_FULL_DEBUG_INFO "Full debug information (-g) in RelWithDebInfo builds instead of line tables" OFF)
if(NOT CORRAL_FULL_DEBUG_INFO)
  add_compile_options($<$<CONFIG:RelWithDebInfo>:-g1>)
endif()

# Asio and Beast compiled once (libs/async/asio_impl.cc, libs/http/beast_impl.cc) instead of inline in every unit
# that includes them. Every unit must agree on these, and on -pthread: they are also what the precompiled headers
# were built with.
add_compile_definitions(BOOST_ASIO_NO_DEPRECATED BOOST_ASIO_SEPARATE_COMPILATION BOOST_BEAST_SEPARATE_COMPILATION)
add_compile_options(-pthread)

# mold links in a fraction of ld.bfd's time (the links run last and one after another at the end of a build;
# with -g1 too, all links took 48 s instead of 136 s).
find_program(CORRAL_MOLD mold)
if(CORRAL_MOLD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12.1)
  add_link_options(-fuse-ld=mold)
endif()

# Unity builds: each target's sources compiled a batch at a time, as one unit that #includes them. Most of a unit's
# time goes to the same headers and the same template instantiations (gRPC stubs, protobuf, Boost.JSON, Asio's
# coroutines) that its neighbours repeat: the CLI's 27 units cost 336 CPU-s one by one and 50 s as one. A batch is
# small enough that two cores stay busy and an edit recompiles only its batch. The price: names private to a file
# (anonymous namespaces, statics) share a batch, so they must not clash; -DCORRAL_UNITY_BUILD=OFF builds file by
# file, which is what an include-what-you-use check wants.
option(CORRAL_UNITY_BUILD "Compile each target's sources in batches (unity build)" ON)
set(CMAKE_UNITY_BUILD ${CORRAL_UNITY_BUILD})
set(CMAKE_UNITY_BUILD_BATCH_SIZE 8)
