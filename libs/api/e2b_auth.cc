#include "libs/api/e2b_auth.h"

#include "absl/strings/str_cat.h"
#include "libs/api/ids.h"

namespace corral::api {
namespace {

constexpr char kApiKey[] = "e2b-api-key";
constexpr char kAccess[] = "e2b-envd-access";

}  // namespace

absl::StatusOr<std::string> E2bAuth::MintApiKey(absl::string_view name) const {
  if (absl::Status s = ValidateId("key name", name); !s.ok()) return s;
  return signer_.Sign(kApiKey, name);
}

absl::StatusOr<std::string> E2bAuth::Owner(absl::string_view api_key) const {
  if (api_key.empty()) return absl::UnauthenticatedError("no API key (X-API-KEY)");
  auto name = signer_.Verify(kApiKey, api_key);
  if (!name.ok()) return absl::UnauthenticatedError("invalid API key: issue one with `corral sandbox-api key NAME`");
  return name;
}

// The payload is "<owner>/<sandbox id>": a key's name never holds a slash.
std::string E2bAuth::AccessToken(absl::string_view owner, absl::string_view sandbox_id) const {
  return signer_.Sign(kAccess, absl::StrCat(owner, "/", sandbox_id));
}

absl::StatusOr<std::string> E2bAuth::CheckAccess(absl::string_view sandbox_id, absl::string_view token) const {
  auto payload = signer_.Verify(kAccess, token);
  const size_t slash = payload.ok() ? payload->rfind('/') : std::string::npos;
  if (slash == std::string::npos || absl::string_view(*payload).substr(slash + 1) != sandbox_id) {
    return absl::UnauthenticatedError(
        absl::StrCat("unauthorized access to sandbox ", sandbox_id, ": X-Access-Token is not its envdAccessToken"));
  }
  return payload->substr(0, slash);
}

}  // namespace corral::api
