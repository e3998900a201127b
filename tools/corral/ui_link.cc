#include "tools/corral/ui_link.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "libs/core/host_port.h"
#include "libs/core/token.h"
#include "libs/rpc/auth.h"

namespace corral::cli {

absl::StatusOr<std::string> InspectorLink(const std::string& base, const std::string& secret_file,
                                          const std::string& batch, const std::string& episode) {
  absl::string_view rest = base;
  if (!absl::ConsumePrefix(&rest, "http://") && !absl::ConsumePrefix(&rest, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("'", base, "' is not an http:// address"));
  }
  absl::ConsumeSuffix(&rest, "/");
  auto host_port = SplitHostPort(std::string(rest));
  if (!host_port.ok()) return host_port.status();
  std::string link = absl::StrCat(absl::StripSuffix(base, "/"), "/");
  if (!IsLoopbackHost(host_port->first)) {
    if (secret_file.empty()) {
      return absl::InvalidArgumentError(
          "the inspector is not on loopback, so it wants the cluster token: pass --secret-file to put it in the link");
    }
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
