// Boost.Asio compiled once, here, for every target that links corral::async (BOOST_ASIO_SEPARATE_COMPILATION is
// defined for the whole build: cmake/CorralBuildSpeed.cmake), instead of inline in every unit that includes it.
#include <boost/asio/impl/src.hpp>
