// What envd's handlers (envd.cc, envd_files.cc) share of the wire: reading a Connect call's fields and its
// user, and answering in the shapes the e2b SDK decodes — Connect errors (unary: a JSON error with its HTTP
// status; streams: the end envelope), and /files' {"code", "message"}. Every coroutine here takes named values
// only (GCC 12 mishandles temporaries in co_await arguments).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "boost/asio/awaitable.hpp"
#include "boost/json/object.hpp"
#include "libs/http/server.h"

namespace corral::sandbox_api::envd_wire {

// How often a quiet stream (a process's output, a directory watch) sends a keepalive.
inline constexpr absl::Duration kKeepalive = absl::Seconds(30);

inline constexpr char kStreamType[] = "application/connect+json";
inline constexpr char kJson[] = "application/json";

// A string field ("" when absent or not a string), an object field (null likewise), a bool field (false).
std::string StringField(const boost::json::object& o, const char* key);
const boost::json::object* ObjectField(const boost::json::object& o, const char* key);
bool BoolField(const boost::json::object& o, const char* key);

// The user a call names (Basic auth on RPCs, `username` on /files): every sandbox has one, "user";
// PERMISSION_DENIED for another, UNAUTHENTICATED for a malformed Authorization.
absl::Status CheckUser(absl::string_view user);
absl::Status CheckBasicUser(const http::Request& request);

// /files' HTTP status for an error: http::connect::HttpStatus's, but 507 for RESOURCE_EXHAUSTED (a full disk).
int FilesStatus(absl::StatusCode code);
// A stream's lifetime from Connect-Timeout-Ms; `fallback` without one (and at most that).
absl::Duration StreamTimeout(const http::Request& request, absl::Duration fallback);

// A whole answer (`body` is moved out).
boost::asio::awaitable<void> Reply(http::Responder& responder, int status, const char* type, std::string& body);
// A /files or /health error: {"code": status, "message"}.
boost::asio::awaitable<void> ReplyError(http::Responder& responder, const absl::Status& s, int status);
// Ends a stream with `status`, starting it first when nothing was sent yet (a stream's status line is read
// before its body, so its errors travel in its end envelope).
boost::asio::awaitable<void> EndStreamWith(http::Responder& responder, const absl::Status& status);
// A Connect error: in the stream's end envelope, or as a unary call's JSON error with its HTTP status.
boost::asio::awaitable<void> ReplyConnectError(http::Responder& responder, const absl::Status& s, bool stream);

}  // namespace corral::sandbox_api::envd_wire
