// Writing a file so that readers see either the old file or the complete new one: the bytes go
// to a temporary file in the same directory, are flushed to disk, and the file is renamed into
// place. On failure the temporary file is removed and the target is left untouched.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fp4cl {

struct ByteRange {
  const void* data;
  std::size_t size;
};

// Writes the concatenation of `pieces` to `path`; throws fp4cl::Error naming the path.
void write_file_atomically(const std::string& path, const std::vector<ByteRange>& pieces);

}  // namespace fp4cl
