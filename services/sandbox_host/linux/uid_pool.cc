#include "services/sandbox_host/linux/uid_pool.h"

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace corral::sandbox {

UidPool::UidPool(uid_t first, uid_t last, const absl::flat_hash_set<uid_t>& reserved) {
  for (uid_t uid = first; uid <= last && uid >= first; ++uid) {
    if (!reserved.contains(uid)) free_.push_back(uid);
  }
}

std::optional<uid_t> UidPool::Acquire() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) return std::nullopt;
  uid_t uid = free_.front();
  free_.pop_front();
  in_use_.insert(uid);
  return uid;
}

void UidPool::Release(uid_t uid, bool clean) {
  absl::MutexLock lock(&mu_);
  if (in_use_.erase(uid) == 0) return;  // not ours, or released twice: nothing to give back
  if (clean) {
    free_.push_back(uid);
  } else {
    quarantine_.insert(uid);
  }
}

size_t UidPool::SweepQuarantine(const std::function<bool(uid_t)>& is_clean) {
  std::vector<uid_t> candidates;
  {
    absl::MutexLock lock(&mu_);
    candidates.assign(quarantine_.begin(), quarantine_.end());
  }
  std::vector<uid_t> cleaned;
  for (uid_t uid : candidates) {
    if (is_clean(uid)) cleaned.push_back(uid);  // checked without the lock: it reads /proc
  }
  absl::MutexLock lock(&mu_);
  for (uid_t uid : cleaned) {
    if (quarantine_.erase(uid)) free_.push_back(uid);
  }
  return quarantine_.size();
}

size_t UidPool::free_count() const {
  absl::MutexLock lock(&mu_);
  return free_.size();
}

size_t UidPool::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_.size();
}

size_t UidPool::quarantined() const {
  absl::MutexLock lock(&mu_);
  return quarantine_.size();
}

absl::StatusOr<absl::flat_hash_set<uid_t>> ReadPasswdUids(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  absl::flat_hash_set<uid_t> uids;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ':');
    uint32_t uid = 0;
    if (fields.size() >= 3 && absl::SimpleAtoi(fields[2], &uid)) uids.insert(uid);
  }
  return uids;
}

}  // namespace corral::sandbox
