// The round-trip section of `fp4cl demo`: quantizes a random BF16 matrix to NVFP4 and MXFP4 on
// the device, dequantizes it back, checks the device bit for bit against the host reference, and
// reports the round trip's error and the kernels' throughput.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fp4cl/context.hpp"

namespace fp4cl::cli {

struct RoundTripOptions {
  std::int64_t rows = 1024, cols = 4096;
  int runs = 10;
  unsigned seed = 1;
  std::vector<std::size_t> local_size;  // empty: per device kind
  std::size_t blocks_per_item = 0;      // 0: per device kind
};

// Prints the section; returns false when the device disagrees with the host reference.
bool demo_roundtrip(const Context& ctx, const RoundTripOptions& options);

}  // namespace fp4cl::cli
