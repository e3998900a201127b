// Boost.JSON compiled once, here (header-only mode), for every target that links corral::http.
#include <boost/json/src.hpp>
