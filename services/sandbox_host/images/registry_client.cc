#include "services/sandbox_host/images/registry_client.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "boost/json.hpp"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/images/oci_image.h"

namespace corral::sandbox {
namespace {

namespace json = boost::json;
constexpr char kDockerHub[] = "docker.io";

bool ValidTag(absl::string_view tag) {
  if (tag.empty() || tag.size() > 128) return false;
  for (size_t i = 0; i < tag.size(); ++i) {
    const char c = tag[i];
    const bool word = absl::ascii_isalnum(c) || c == '_';
    if (!(word || (i > 0 && (c == '.' || c == '-')))) return false;
  }
  return true;
}

// A path component: lowercase letters and digits, separated by one '.', '_' or '-' (or "__").
bool ValidComponent(absl::string_view c) {
  if (c.empty() || !absl::ascii_isalnum(c.front()) || !absl::ascii_isalnum(c.back())) return false;
  for (char ch : c) {
    if (absl::ascii_isupper(ch)) return false;
    if (!absl::ascii_isalnum(ch) && ch != '.' && ch != '_' && ch != '-') return false;
  }
  return !absl::StrContains(c, "..") && !absl::StrContains(c, "--.") && !absl::StrContains(c, "___");
}

std::string PercentEncode(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::BytesToHexString(std::string(1, static_cast<char>(c))));
    }
  }
  return out;
}

// `Bearer realm="…",service="…",scope="…"`: the scheme (lowercased) and its parameters.
std::pair<std::string, std::map<std::string, std::string>> ParseChallenge(absl::string_view header) {
  header = absl::StripAsciiWhitespace(header);
  const size_t space = header.find(' ');
  std::pair<std::string, std::map<std::string, std::string>> out;
  out.first = absl::AsciiStrToLower(header.substr(0, space));
  if (space == absl::string_view::npos) return out;
  absl::string_view rest = header.substr(space + 1);
  while (!rest.empty()) {
    rest = absl::StripLeadingAsciiWhitespace(rest);
    const size_t eq = rest.find('=');
    if (eq == absl::string_view::npos) break;
    const std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(rest.substr(0, eq)));
    rest.remove_prefix(eq + 1);
    std::string value;
    if (absl::ConsumePrefix(&rest, "\"")) {
      size_t i = 0;
      for (; i < rest.size() && rest[i] != '"'; ++i) {
        if (rest[i] == '\\' && i + 1 < rest.size()) ++i;
        value.push_back(rest[i]);
      }
      rest.remove_prefix(std::min(rest.size(), i + 1));
    } else {
      const size_t end = rest.find(',');
      value = std::string(absl::StripAsciiWhitespace(rest.substr(0, end)));
      rest.remove_prefix(end == absl::string_view::npos ? rest.size() : end);
    }
    out.second[key] = std::move(value);
    rest = absl::StripLeadingAsciiWhitespace(rest);
    absl::ConsumePrefix(&rest, ",");
  }
  return out;
}

absl::Status HttpError(int status, const std::string& what, const std::string& body) {
  // Registries answer errors as {"errors":[{"code":…,"message":…}]}.
  std::string detail;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (const json::value* errors = v.as_object().if_contains("errors"); errors != nullptr && errors->is_array()) {
      for (const json::value& e : errors->as_array()) {
        if (!e.is_object()) continue;
        const json::value* code = e.as_object().if_contains("code");
        const json::value* message = e.as_object().if_contains("message");
        absl::StrAppend(&detail, detail.empty() ? "" : "; ", code && code->is_string() ? code->as_string().c_str() : "",
                        message && message->is_string() ? absl::StrCat(": ", message->as_string().c_str()) : "");
      }
    }
  }
  const std::string message =
      absl::StrCat(what, ": HTTP ", status, detail.empty() ? "" : absl::StrCat(" (", detail, ")"));
  if (status == 401) return absl::UnauthenticatedError(message);
  if (status == 403) return absl::PermissionDeniedError(message);
  if (status == 404) return absl::NotFoundError(message);
  if (status == 429 || status >= 500) return absl::UnavailableError(message);
  return absl::FailedPreconditionError(message);
}

}  // namespace

std::string ImageReference::ToString() const {
  return absl::StrCat(registry, "/", repository, tag.empty() ? "" : ":", tag, digest.empty() ? "" : "@", digest);
}

absl::StatusOr<ImageReference> ParseImageReference(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("image reference '", text, "': ", why));
  };
  if (text.empty() || text.size() > 1024) return bad("empty or too long");
  ImageReference ref;
  absl::string_view name = text;
  if (const size_t at = name.find('@'); at != absl::string_view::npos) {
    ref.digest = std::string(name.substr(at + 1));
    if (!ValidateDigest(ref.digest).ok()) return bad("the digest must be sha256: and 64 lowercase hex digits");
    name = name.substr(0, at);
  }
  const size_t slash = name.find('/');
  absl::string_view first = name.substr(0, slash);
  if (slash != absl::string_view::npos &&
      (absl::StrContains(first, '.') || absl::StrContains(first, ':') || first == "localhost")) {
    ref.registry = std::string(first);
    name = name.substr(slash + 1);
  } else {
    ref.registry = kDockerHub;
  }
  if (const size_t colon = name.rfind(':'); colon != absl::string_view::npos) {
    ref.tag = std::string(name.substr(colon + 1));
    if (!ValidTag(ref.tag)) return bad("a tag is letters, digits, '_', '.' and '-' (at most 128)");
    name = name.substr(0, colon);
  }
  for (absl::string_view c : absl::StrSplit(name, '/')) {
    if (!ValidComponent(c)) return bad(absl::StrCat("'", c, "' is not a repository name component (lowercase)"));
  }
  ref.repository = std::string(name);
  if (ref.registry == kDockerHub && !absl::StrContains(ref.repository, '/')) {
    ref.repository = absl::StrCat("library/", ref.repository);
  }
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

absl::StatusOr<std::map<std::string, std::string>> LoadRegistryCredentials(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  json::value v = json::parse(text.str(), ec);
  const json::value* auths = !ec && v.is_object() ? v.as_object().if_contains("auths") : nullptr;
  if (auths == nullptr || !auths->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an auth file ({\"auths\": {registry: {...}}})"));
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, entry] : auths->as_object()) {
    absl::string_view name(key.data(), key.size());
    absl::ConsumePrefix(&name, "https://");
    absl::ConsumePrefix(&name, "http://");
    const std::string registry(absl::StripSuffix(name, "/"));
    const json::object* o = entry.if_object();
    if (o == nullptr)
      return absl::InvalidArgumentError(absl::StrCat(path, ": the entry for ", registry, " is not an object"));
    std::string pair;
    if (const json::value* auth = o->if_contains("auth"); auth != nullptr && auth->is_string()) {
      if (!absl::Base64Unescape(auth->as_string().c_str(), &pair) || !absl::StrContains(pair, ':')) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": the auth of ", registry, " is not base64 of user:password"));
      }
    } else {
      const json::value* user = o->if_contains("username");
      const json::value* password = o->if_contains("password");
      if (user == nullptr || password == nullptr || !user->is_string() || !password->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": ", registry, " has neither auth nor username/password"));
      }
      pair = absl::StrCat(user->as_string().c_str(), ":", password->as_string().c_str());
    }
    out[registry] = std::move(pair);
  }
  return out;
}

RegistryClient::RegistryClient(RegistryOptions options) : options_(std::move(options)) {}

std::string RegistryClient::RegistryHost(const std::string& registry) const {
  return registry == kDockerHub ? "registry-1.docker.io" : registry;
}

absl::StatusOr<RegistryClient::Url> RegistryClient::ParseUrl(absl::string_view text) const {
  CORRAL_ASSIGN_OR_RETURN(Url url, http::ParseUrl(text));
  if (!url.tls) {  // plain HTTP only where the configuration allows it
    const std::string hostport = url.authority();
    const auto& insecure = options_.insecure_registries;
    if (std::find(insecure.begin(), insecure.end(), hostport) == insecure.end() &&
        std::find(insecure.begin(), insecure.end(), url.host) == insecure.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(text, ": plain HTTP to ", hostport, " is refused (list it in insecure_registries to allow it)"));
    }
  }
  return url;
}

absl::StatusOr<http::FetchReply> RegistryClient::Exchange(
    const Url& url, const std::vector<std::pair<std::string, std::string>>& headers,
    const std::function<absl::Status(absl::string_view)>& sink, uint64_t max_bytes) const {
  const http::FetchOptions options{.ca_file = options_.ca_file,
                                   .ca_hint = "a private CA goes in registry_ca_file",
                                   .timeout = options_.timeout,
                                   .user_agent = "corral-sandbox-host",
                                   .max_bytes = max_bytes};
  return http::Fetch(url, headers, options, sink);
}

absl::StatusOr<std::string> RegistryClient::FetchToken(const std::string& registry,
                                                       const std::map<std::string, std::string>& challenge,
                                                       const std::string& scope) {
  auto realm = challenge.find("realm");
  if (realm == challenge.end())
    return absl::UnauthenticatedError(absl::StrCat(registry, " asked for a token but named no realm"));
  CORRAL_ASSIGN_OR_RETURN(Url url, ParseUrl(realm->second));
  url.target += absl::StrContains(url.target, '?') ? "&" : "?";
  if (auto service = challenge.find("service"); service != challenge.end()) {
    absl::StrAppend(&url.target, "service=", PercentEncode(service->second), "&");
  }
  absl::StrAppend(&url.target, "scope=", PercentEncode(scope));
  std::vector<std::pair<std::string, std::string>> headers;
  auto credentials = options_.credentials.find(registry);
  if (credentials != options_.credentials.end()) {
    headers.emplace_back("Authorization", absl::StrCat("Basic ", absl::Base64Escape(credentials->second)));
  }
  std::string body;
  CORRAL_ASSIGN_OR_RETURN(http::FetchReply reply, Exchange(
                                                      url, headers,
                                                      [&](absl::string_view piece) {
                                                        body.append(piece.data(), piece.size());
                                                        return absl::OkStatus();
                                                      },
                                                      1 << 20));
  if (reply.status == 401 || reply.status == 403) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the token service of ", registry, " refused ",
        credentials == options_.credentials.end() ? "an anonymous request (no credentials for it in registry_auth_file)"
                                                  : "the credentials of registry_auth_file",
        " for ", scope));
  }
  if (reply.status != 200)
    return HttpError(reply.status, absl::StrCat("token for ", scope, " from ", url.ToString()), reply.error_body);
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  const json::value* token = o == nullptr ? nullptr : o->if_contains("token");
  if (token == nullptr || !token->is_string() || token->as_string().empty()) {
    token = o == nullptr ? nullptr : o->if_contains("access_token");
  }
  if (token == nullptr || !token->is_string() || token->as_string().empty()) {
    return absl::UnauthenticatedError(absl::StrCat("the token service ", url.ToString(), " answered no token"));
  }
  int64_t expires_in = 60;
  if (const json::value* e = o->if_contains("expires_in"); e != nullptr && e->is_int64()) expires_in = e->as_int64();
  std::string header = absl::StrCat("Bearer ", token->as_string().c_str());
  absl::MutexLock lock(&mu_);
  // Kept a little less than granted, so a token never expires on the way.
  tokens_[absl::StrCat(registry, " ", scope)] = {header,
                                                 absl::Now() + absl::Seconds(std::max<int64_t>(0, expires_in - 10))};
  return header;
}

absl::StatusOr<RegistryResponse> RegistryClient::Get(const ImageReference& ref, absl::string_view kind,
                                                     const std::string& reference,
                                                     const std::vector<std::string>& accept,
                                                     const std::function<absl::Status(absl::string_view)>& sink,
                                                     uint64_t max_bytes) {
  const std::string scope = absl::StrCat("repository:", ref.repository, ":pull");
  const std::string cache_key = absl::StrCat(ref.registry, " ", scope);
  const auto& insecure = options_.insecure_registries;
  const bool plain = std::find(insecure.begin(), insecure.end(), ref.registry) != insecure.end();
  CORRAL_ASSIGN_OR_RETURN(Url url, ParseUrl(absl::StrCat(plain ? "http://" : "https://", RegistryHost(ref.registry),
                                                         "/v2/", ref.repository, "/", kind, "/", reference)));
  const std::string registry_authority = url.authority();
  std::optional<std::string> auth;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = tokens_.find(cache_key); it != tokens_.end() && it->second.expires > absl::Now())
      auth = it->second.header;
  }
  bool challenged = false;
  for (size_t redirects = 0;;) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!accept.empty()) headers.emplace_back("Accept", absl::StrJoin(accept, ", "));
    // Credentials go to the registry only, never to where it redirects (a storage bucket signs its own URLs).
    const bool at_registry = url.authority() == registry_authority;
    if (auth && at_registry) headers.emplace_back("Authorization", *auth);
    CORRAL_ASSIGN_OR_RETURN(http::FetchReply reply, Exchange(url, headers, sink, max_bytes));
    const std::string what = absl::StrCat(ref.ToString(), ": GET ", url.ToString());
    if (reply.status >= 200 && reply.status < 300) {
      RegistryResponse out;
      out.content_type = reply.headers["content-type"];
      out.docker_content_digest = reply.headers["docker-content-digest"];
      if (!absl::SimpleAtoi(reply.headers["content-length"], &out.content_length)) out.content_length = -1;
      return out;
    }
    if (reply.status == 401 && at_registry && !challenged) {
      challenged = true;
      auto [scheme, params] = ParseChallenge(reply.headers["www-authenticate"]);
      if (scheme == "bearer") {
        // The scope the registry names, else the repository's pull scope.
        auto named = params.find("scope");
        CORRAL_ASSIGN_OR_RETURN(std::string header,
                                FetchToken(ref.registry, params, named != params.end() ? named->second : scope));
        auth = header;
        continue;
      }
      if (scheme == "basic") {
        auto credentials = options_.credentials.find(ref.registry);
        if (credentials == options_.credentials.end()) {
          return absl::UnauthenticatedError(
              absl::StrCat(what, ": the registry wants a password and registry_auth_file has none for ", ref.registry));
        }
        auth = absl::StrCat("Basic ", absl::Base64Escape(credentials->second));
        continue;
      }
      return absl::UnauthenticatedError(absl::StrCat(what, ": HTTP 401 with an unsupported challenge '", scheme, "'"));
    }
    if (reply.status == 401) {
      return absl::UnauthenticatedError(absl::StrCat(what, ": HTTP 401 with the token it granted (",
                                                     options_.credentials.count(ref.registry) > 0
                                                         ? "check the credentials' rights"
                                                         : "no credentials for this registry in registry_auth_file",
                                                     ")"));
    }
    if (reply.status >= 300 && reply.status < 400 && reply.headers.count("location") > 0) {
      if (++redirects > options_.max_redirects)
        return absl::UnavailableError(absl::StrCat(what, ": too many redirects"));
      std::string location = reply.headers["location"];
      if (absl::StartsWith(location, "/"))
        location = absl::StrCat(url.tls ? "https://" : "http://", url.authority(), location);
      CORRAL_ASSIGN_OR_RETURN(url, ParseUrl(location));
      continue;
    }
    return HttpError(reply.status, what, reply.error_body);
  }
}

}  // namespace corral::sandbox
