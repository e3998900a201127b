// libFuzzer target for the proxy's request path (build with clang: cmake -DCORRAL_FUZZ=ON -DCMAKE_CXX_COMPILER=
// clang++, then build/bin/proxy-request-fuzzer [corpus]). The same function runs in CI as a replay test.
#include "services/proxy/fuzz/parse_everything.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)corral::proxy::ParseEverything(data, size);
  return 0;
}
