#include "services/sandbox_host/client/output_tail.h"

#include "absl/strings/str_cat.h"

namespace corral::sandbox {

void OutputTail::Append(const std::string& data) {
  total_ += data.size();
  const size_t half = limit_ / 2;
  size_t used = 0;
  if (head_.size() < half) {
    used = std::min(half - head_.size(), data.size());
    head_.append(data, 0, used);
  }
  if (used < data.size()) {
    tail_.append(data, used, std::string::npos);
    const size_t keep = limit_ - half;
    if (tail_.size() > 2 * keep + 4096) tail_.erase(0, tail_.size() - keep);  // amortized trimming
  }
}

std::string OutputTail::Text() const {
  const size_t keep = limit_ - limit_ / 2;
  if (total_ <= limit_) return head_ + tail_;
  const std::string last = tail_.size() > keep ? tail_.substr(tail_.size() - keep) : tail_;
  return absl::StrCat(head_, "\n...[", total_ - head_.size() - last.size(), " bytes elided]...\n", last);
}

std::string OutputTail::Last(size_t n) const {
  const std::string all = tail_.empty() ? head_ : tail_;
  return all.size() > n ? all.substr(all.size() - n) : all;
}

}  // namespace corral::sandbox
