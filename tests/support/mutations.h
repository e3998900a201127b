// Deterministic mutations of seed inputs for the replay tests of the fuzz targets: each mutation makes 1 to 3
// edits — a byte flipped, a structural byte inserted, bytes dropped, a run duplicated, a truncation — drawn
// from a seeded generator, so every run of CI tries the same inputs and a failure can be replayed.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace corral::testing {

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed) {}

  // One mutation of `seed`.
  std::string Mutate(const std::string& seed) {
    std::string m = seed;
    const int edits = 1 + static_cast<int>(rng_() % 3);
    for (int e = 0; e < edits && !m.empty(); ++e) {
      const size_t at = rng_() % m.size();
      switch (rng_() % 10) {
        case 0:
        case 1: m[at] = static_cast<char>(rng_() % 256); break;  // flip a byte
        case 2:
        case 3: m.insert(at, 1, "{}[]\",:\\\r\n\0"[rng_() % 12]); break;  // insert structure
        case 4:
        case 5: m.erase(at, 1 + rng_() % 8); break;  // drop bytes
        case 6:
        case 7:
        case 8: m.insert(at, m.substr(at, 1 + rng_() % 32)); break;  // duplicate a run
        default: m.resize(at); break;                                // truncate
      }
    }
    return m;
  }

 private:
  std::mt19937 rng_;
};

}  // namespace corral::testing
