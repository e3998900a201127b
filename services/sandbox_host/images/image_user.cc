#include "services/sandbox_host/images/image_user.h"

#include <sys/stat.h>
#include <unistd.h>

#include <functional>
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

using Rows = std::vector<std::vector<std::string>>;
using ReadRows = std::function<Rows(const char* path)>;

// A passwd-format file, split into lines of fields; empty when `fd` is not valid.
Rows ReadFile(const UniqueFd& fd) {
  Rows rows;
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

// `path` under `dir` when it is a regular file (a FIFO would block the read, a link is not followed): the open
// file, or nullopt when `dir` has nothing at `path`, or an invalid descriptor when it has something else there.
std::optional<UniqueFd> OpenRegular(int dir, const char* path) {
  UniqueFd found(dir >= 0 ? OpenInRoot(dir, path, O_PATH | O_NOFOLLOW) : -1);
  struct stat st {};
  if (!found.valid() || fstat(found.get(), &st) != 0) return std::nullopt;
  if (!S_ISREG(st.st_mode)) return UniqueFd();
  return UniqueFd(OpenInRoot(dir, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
}

// The image's /etc/passwd or /etc/group from its layers: the top layer that has the file, or deletes it (a
// whiteout), decides.
Rows ReadFromLayers(const std::vector<std::string>& layers, const char* path) {
  for (const std::string& layer : layers) {
    UniqueFd dir(open(layer.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (std::optional<UniqueFd> fd = OpenRegular(dir.get(), path)) return ReadFile(*fd);
  }
  return {};
}

std::optional<uint32_t> ParseId(absl::string_view s) {
  uint32_t id = 0;
  if (s.empty() || !absl::SimpleAtoi(s, &id) || id > kMaxId) return std::nullopt;
  return id;
}

// `user` as `read` finds it; errors name `whose` database ("the image's").
absl::StatusOr<ImageUser> Resolve(const ReadRows& read, const std::string& user, absl::string_view whose) {
  const std::vector<std::string> parts = absl::StrSplit(user, absl::MaxSplits(':', 1));
  const std::string who = parts.empty() ? "" : parts[0];
  const std::string group = parts.size() > 1 ? parts[1] : "";
  ImageUser out;
  const bool numeric = !who.empty() && absl::ascii_isdigit(static_cast<unsigned char>(who[0]));
  if (numeric) {
    auto id = ParseId(who);
    if (!id)
      return absl::InvalidArgumentError(absl::StrCat(whose, " user '", user, "' is not a uid from 0 to ", kMaxId));
    out.uid = *id;
  }
  bool found = false;
  for (const auto& row : read("etc/passwd")) {
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
      return absl::InvalidArgumentError(absl::StrCat(whose, " user '", who, "' is not in its /etc/passwd"));
    }
    out.name = who.empty() ? "root" : who;
    out.home = out.uid == 0 ? "/root" : "/";
  }
  if (!group.empty()) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(group[0]))) {
      auto gid = ParseId(group);
      if (!gid)
        return absl::InvalidArgumentError(absl::StrCat(whose, " group '", group, "' is not a gid from 0 to ", kMaxId));
      out.gid = *gid;
    } else {
      bool group_found = false;
      for (const auto& row : read("etc/group")) {
        if (row.size() >= 3 && row[0] == group && ParseId(row[2])) {
          out.gid = *ParseId(row[2]);
          group_found = true;
          break;
        }
      }
      if (!group_found)
        return absl::InvalidArgumentError(absl::StrCat(whose, " group '", group, "' is not in its /etc/group"));
    }
  }
  if (out.home.empty() || out.home[0] != '/') out.home = "/";
  return out;
}

}  // namespace

absl::StatusOr<ImageUser> ResolveImageUser(const std::vector<std::string>& layers, const std::string& user) {
  return Resolve([&](const char* path) { return ReadFromLayers(layers, path); }, user, "the image's");
}

absl::StatusOr<ImageUser> ResolveUserInRoot(int root_fd, const std::string& user) {
  auto read = [&](const char* path) {
    std::optional<UniqueFd> fd = OpenRegular(root_fd, path);
    return fd ? ReadFile(*fd) : Rows();
  };
  return Resolve(read, user, "the sandbox's");
}

}  // namespace corral::sandbox
