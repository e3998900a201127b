#include "libs/core/token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "openssl/crypto.h"
#include "openssl/evp.h"
#include "openssl/hmac.h"
#include "openssl/rand.h"

namespace corral {
namespace {
constexpr size_t kMaxKeyFileBytes = 64 * 1024;
}  // namespace

absl::StatusOr<TokenSigner> TokenSigner::FromKey(std::string key) {
  if (key.size() < kMinKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("secret key is ", key.size(), " bytes; at least ", kMinKeyBytes,
                                                   " are required (e.g. `openssl rand -hex 32`)"));
  }
  return TokenSigner(std::move(key));
}

absl::StatusOr<TokenSigner> TokenSigner::FromKeyFile(const std::string& path) {
  // Symlinks are followed: a Kubernetes Secret volume links each key into a timestamped directory.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string msg = absl::StrCat("cannot open secret file '", path, "': ", strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::FailedPreconditionError(msg);
  }
  struct stat st {};
  std::string key;
  absl::Status status;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = absl::FailedPreconditionError(absl::StrCat("secret file '", path, "' is not a regular file"));
  } else if ((st.st_mode & (st.st_uid == 0 ? 037 : 077)) != 0) {
    // PostgreSQL's rule for key files: private to its owner, or also readable by the group when root owns it
    // (a Kubernetes Secret mounted with fsGroup, a file an admin shares with the service's group).
    status = absl::FailedPreconditionError(absl::StrFormat(
        "secret file '%s' has mode %04o (owner uid %d); it must not be accessible to others, nor to the group "
        "unless root owns it and the group may only read (chmod 600 '%s')",
        path, st.st_mode & 07777, st.st_uid, path));
  } else if (static_cast<size_t>(st.st_size) > kMaxKeyFileBytes) {
    status = absl::FailedPreconditionError(absl::StrCat("secret file '", path, "' is larger than 64 KiB"));
  } else {
    key.resize(static_cast<size_t>(st.st_size));
    ssize_t n = read(fd, key.data(), key.size());
    if (n < 0) {
      status = absl::FailedPreconditionError(absl::StrCat("cannot read secret file '", path, "': ", strerror(errno)));
    }
    key.resize(n < 0 ? 0 : static_cast<size_t>(n));
  }
  close(fd);
  if (!status.ok()) return status;
  absl::StripTrailingAsciiWhitespace(&key);
  auto signer = FromKey(std::move(key));
  if (!signer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("secret file '", path, "': ", signer.status().message()));
  }
  return signer;
}

TokenSigner TokenSigner::Ephemeral() {
  std::string key(kMinKeyBytes, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size()));
  return TokenSigner(std::move(key));
}

std::string TokenSigner::Mac(absl::string_view purpose, absl::string_view payload) const {
  std::string message = absl::StrCat(purpose, absl::string_view("\0", 1), payload);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), mac, &mac_len);
  return absl::WebSafeBase64Escape(absl::string_view(reinterpret_cast<const char*>(mac), mac_len));
}

std::string TokenSigner::Sign(absl::string_view purpose, absl::string_view payload) const {
  return absl::StrCat(payload, ".", Mac(purpose, payload));
}

absl::StatusOr<std::string> TokenSigner::Verify(absl::string_view purpose, absl::string_view token) const {
  size_t dot = token.rfind('.');
  if (dot == absl::string_view::npos || dot == 0) {
    return absl::UnauthenticatedError("malformed token: expected '<id>.<signature>'");
  }
  absl::string_view payload = token.substr(0, dot);
  absl::string_view given = token.substr(dot + 1);
  std::string expected = Mac(purpose, payload);
  // Lengths are public (a MAC's encoding has a fixed size); the bytes are compared in constant time.
  if (given.size() != expected.size() || CRYPTO_memcmp(given.data(), expected.data(), expected.size()) != 0) {
    return absl::UnauthenticatedError("invalid token signature");
  }
  return std::string(payload);
}

}  // namespace corral
