// Boost.Asio's TLS support compiled once, here, for corral::http_fetch (see libs/async/asio_impl.cc).
#include <boost/asio/ssl/impl/src.hpp>
