#include "tools/corral/ui_link.h"

#include "absl/strings/str_cat.h"
#include "libs/core/token.h"
#include "libs/http/url.h"
#include "libs/rpc/auth.h"

namespace corral::cli {

absl::StatusOr<std::string> InspectorLink(const std::string& base, const std::string& secret_file,
                                          const std::string& batch, const std::string& episode) {
  auto url = http::ParseHttpUrl(base, "the inspector's address");
  if (!url.ok()) return url.status();
  std::string link = absl::StrCat("http://", url->authority(), "/");
  // The inspector wants the cluster token on every interface (a sandbox on this machine reaches loopback too).
  if (!secret_file.empty()) {
    auto signer = TokenSigner::FromKeyFile(secret_file);
    if (!signer.ok()) return signer.status();
    absl::StrAppend(&link, "?token=", MintClusterToken(*signer));
  }
  if (!episode.empty()) {
    absl::StrAppend(&link, "#/episode/", episode);
  } else if (!batch.empty()) {
    absl::StrAppend(&link, "#/batch/", batch);
  }
  return link;
}

}  // namespace corral::cli
