// Boost.Beast compiled once, here, for every target that links corral::http (BOOST_BEAST_SEPARATE_COMPILATION is
// defined for the whole build: cmake/CorralBuildSpeed.cmake), instead of inline in every unit that includes it.
#include <boost/beast/src.hpp>
