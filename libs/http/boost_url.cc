// Boost.URL compiled once, here (header-only mode, as Boost.JSON is), for every target that links corral::http.
#include <boost/url/src.hpp>
