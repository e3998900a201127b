#include "services/sandbox_host/images/image_user.h"

#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/linux/open_in_root.h"

namespace corral::sandbox {
namespace {

constexpr size_t kMaxDatabaseBytes = 4 << 20;
constexpr uint32_t kMaxId = 65535;  // what one user namespace maps here; larger ids are refused

// The image's /etc/passwd or /etc/group, split into lines of fields; empty when it has none.
std::vector<std::vector<std::string>> ReadDatabase(const std::vector<std::string>& layers, const char* path) {
  std::vector<std::vector<std::string>> rows;
  UniqueFd fd;
  for (const std::string& layer : layers) {
    UniqueFd dir(open(layer.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    UniqueFd found(dir.valid() ? OpenInRoot(dir.get(), path, O_PATH | O_NOFOLLOW) : -1);
    struct stat st {};
    if (!found.valid() || fstat(found.get(), &st) != 0) continue;  // not in this layer: look below
    if (!S_ISREG(st.st_mode)) return rows;                         // a whiteout (or worse): the image has none
    fd.Reset(OpenInRoot(dir.get(), path, O_RDONLY | O_NOFOLLOW));
    break;
  }
  if (!fd.valid()) return rows;
  std::string text;
  char buf[65536];
  ssize_t n;
  while (text.size() < kMaxDatabaseBytes && (n = read(fd.get(), buf, sizeof buf)) > 0) text.append(buf, n);
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    rows.push_back(absl::StrSplit(line, ':'));
  }
  return rows;
}

std::optional<uint32_t> ParseId(absl::string_view s) {
  uint32_t id = 0;
  if (s.empty() || !absl::SimpleAtoi(s, &id) || id > kMaxId) return std::nullopt;
  return id;
}

}  // namespace

absl::StatusOr<ImageUser> ResolveImageUser(const std::vector<std::string>& layers, const std::string& user) {
  const std::vector<std::string> parts = absl::StrSplit(user, absl::MaxSplits(':', 1));
  const std::string who = parts.empty() ? "" : parts[0];
  const std::string group = parts.size() > 1 ? parts[1] : "";
  ImageUser out;
  const bool numeric = !who.empty() && absl::ascii_isdigit(static_cast<unsigned char>(who[0]));
  if (numeric) {
    auto id = ParseId(who);
    if (!id)
      return absl::InvalidArgumentError(absl::StrCat("the image's user '", user, "' is not a uid from 0 to ", kMaxId));
    out.uid = *id;
  }
  bool found = false;
  for (const auto& row : ReadDatabase(layers, "etc/passwd")) {
    if (row.size() < 7) continue;
    auto uid = ParseId(row[2]);
    auto gid = ParseId(row[3]);
    if (!uid || !gid) continue;
    if (who.empty() ? *uid == 0 : numeric ? *uid == out.uid : row[0] == who) {
      out.uid = *uid;
      out.gid = *gid;
      out.name = row[0];
      out.home = row[5];
      found = true;
      break;
    }
  }
  if (!found) {
    if (!who.empty() && !numeric) {
      return absl::InvalidArgumentError(absl::StrCat("the image's user '", who, "' is not in its /etc/passwd"));
    }
    out.name = who.empty() ? "root" : who;
    out.home = out.uid == 0 ? "/root" : "/";
  }
  if (!group.empty()) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(group[0]))) {
      auto gid = ParseId(group);
      if (!gid)
        return absl::InvalidArgumentError(
            absl::StrCat("the image's group '", group, "' is not a gid from 0 to ", kMaxId));
      out.gid = *gid;
    } else {
      bool group_found = false;
      for (const auto& row : ReadDatabase(layers, "etc/group")) {
        if (row.size() >= 3 && row[0] == group && ParseId(row[2])) {
          out.gid = *ParseId(row[2]);
          group_found = true;
          break;
        }
      }
      if (!group_found)
        return absl::InvalidArgumentError(absl::StrCat("the image's group '", group, "' is not in its /etc/group"));
    }
  }
  if (out.home.empty() || out.home[0] != '/') out.home = "/";
  return out;
}

}  // namespace corral::sandbox
