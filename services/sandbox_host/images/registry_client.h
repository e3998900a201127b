// The client side of the OCI distribution API, for pulling images: image references parsed as Docker does,
// HTTPS with the peer verified (the system's CAs plus an optional bundle), the registry token flow (a 401's
// `WWW-Authenticate: Bearer realm=…,service=…,scope=…` answered with a token from the realm, with Basic
// credentials when configured), Basic auth, and redirects (blobs are often served from elsewhere; credentials
// never follow a redirect to another host). Blocking: it runs on the host's image workers. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "libs/http/fetch.h"
#include "libs/http/url.h"

namespace corral::sandbox {

// registry/repository[:tag][@sha256:…]. A first component without '.', ':' or "localhost" is not a registry:
// the registry is then Docker Hub (docker.io, reached at registry-1.docker.io) and a one-component repository
// gets "library/". No tag and no digest: "latest".
struct ImageReference {
  std::string registry;          // host[:port], as written (docker.io for Docker Hub)
  std::string repository;        // lowercase path components
  std::string tag;               // empty when only a digest is given
  std::string digest;            // sha256:…, or empty
  std::string ToString() const;  // the normalized name: registry/repository[:tag][@digest]
};
// INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<ImageReference> ParseImageReference(absl::string_view ref);

struct RegistryOptions {
  std::string ca_file;                             // PEM certificates trusted besides the system's
  std::vector<std::string> insecure_registries;    // host[:port] reached over plain HTTP
  std::map<std::string, std::string> credentials;  // registry host[:port] -> "user:password"
  absl::Duration timeout = absl::Seconds(60);      // connect, and each read or write
  size_t max_redirects = 5;
};

// Credentials from a Docker/podman auth file (`{"auths": {"host": {"auth": base64("user:pw")}}}`, or
// username/password fields). INVALID_ARGUMENT for an unreadable or malformed file.
absl::StatusOr<std::map<std::string, std::string>> LoadRegistryCredentials(const std::string& path);

struct RegistryResponse {
  std::string content_type;
  std::string docker_content_digest;  // the Docker-Content-Digest header, when sent
  int64_t content_length = -1;
};

class RegistryClient {
 public:
  explicit RegistryClient(RegistryOptions options);

  // GET /v2/<repository>/<kind>/<reference> (kind: "manifests" or "blobs") on the reference's registry,
  // authenticating as the registry asks (tokens are cached per registry and scope until they expire). The body
  // goes to `sink` piece by piece; at most `max_bytes` of it. UNAUTHENTICATED (401 even with the credentials
  // there are), PERMISSION_DENIED (403), NOT_FOUND (404), UNAVAILABLE (cannot connect, TLS refused, 429, 5xx),
  // DEADLINE_EXCEEDED (a read or write timed out), RESOURCE_EXHAUSTED (over max_bytes); messages name the URL.
  absl::StatusOr<RegistryResponse> Get(const ImageReference& ref, absl::string_view kind, const std::string& reference,
                                       const std::vector<std::string>& accept,
                                       const std::function<absl::Status(absl::string_view)>& sink, uint64_t max_bytes);

 private:
  using Url = http::Url;
  // http::ParseUrl, and plain HTTP only to the insecure registries.
  absl::StatusOr<Url> ParseUrl(absl::string_view url) const;
  // One GET on a fresh connection (http::Fetch) with the registry options' CA and timeout.
  absl::StatusOr<http::FetchReply> Exchange(const Url& url,
                                            const std::vector<std::pair<std::string, std::string>>& headers,
                                            const std::function<absl::Status(absl::string_view)>& sink,
                                            uint64_t max_bytes) const;
  // A token for `scope` from the challenge's realm. UNAUTHENTICATED when the realm refuses.
  absl::StatusOr<std::string> FetchToken(const std::string& registry,
                                         const std::map<std::string, std::string>& challenge, const std::string& scope);
  std::string RegistryHost(const std::string& registry) const;  // docker.io -> registry-1.docker.io

  const RegistryOptions options_;
  struct CachedToken {
    std::string header;  // "Bearer …" or "Basic …"
    absl::Time expires;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, CachedToken> tokens_ ABSL_GUARDED_BY(mu_);  // by "registry scope"
};

}  // namespace corral::sandbox
