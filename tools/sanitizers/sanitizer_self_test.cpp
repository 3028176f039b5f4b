// Proof that the sanitized build checks what it claims to (tools/sanitizers/CMakeLists.txt runs
// each mode as a ctest test that passes only when the sanitizer reports the planted bug):
//   leak  loses an object the library allocated (a SafetensorsWriter holding a tensor): LSan
//         must report it at exit, with the library's frames in the stack, through the
//         project's suppressions (which cover code outside fp4cl only);
//   ub    a signed overflow: UBSan must report it and stop the process (no recovery).
#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fp4cl/safetensors.hpp"

namespace {
fp4cl::SafetensorsWriter* volatile g_sink = nullptr;  // volatile: the allocation cannot be elided
volatile int g_big = INT_MAX;
}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "leak") == 0) {
    auto* writer = new fp4cl::SafetensorsWriter;
    writer->add<float>("leaked", {64}, std::vector<float>(64, 1.0f));
    g_sink = writer;
    g_sink = nullptr;  // the last pointer to it is gone
    std::puts("sanitizer_self_test: leaked a SafetensorsWriter");
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "ub") == 0) {
    const int overflow = g_big + 1;
    std::printf("sanitizer_self_test: INT_MAX + 1 = %d\n", overflow);
    return 0;
  }
  std::fprintf(stderr, "usage: sanitizer_self_test leak|ub\n");
  return 2;
}
