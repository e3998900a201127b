// Process output bounded to a size: the head and the tail kept, the middle counted (tool outputs, agent logs).
#pragma once

#include <cstddef>
#include <string>

namespace corral::sandbox {

// Process output bounded to `limit` bytes: the first half and the last half are kept, the middle counted.
class OutputTail {
 public:
  explicit OutputTail(size_t limit) : limit_(limit) {}
  void Append(const std::string& data);
  // The output, middle-elided ("...[N bytes elided]...") when it was longer than the limit.
  std::string Text() const;
  // The last `n` bytes.
  std::string Last(size_t n) const;
  size_t total() const { return total_; }

 private:
  size_t limit_;
  size_t total_ = 0;
  std::string head_, tail_;
};

}  // namespace corral::sandbox
