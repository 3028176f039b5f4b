# Turns every .cl file under KERNEL_DIR into one C++ source (OUTPUT) that holds them as string
# literals, keyed by their path relative to KERNEL_DIR. `#include "..."` lines are resolved later,
# at program-build time, against the same table (host/cl/kernel_sources.cpp).
include(${CMAKE_CURRENT_LIST_DIR}/EmbedTextFiles.cmake)
fp4cl_embed_text_files(SOURCES "kernels/*.cl" DIR ${KERNEL_DIR} PATTERN *.cl RECURSE ON KEY_PREFIX ""
  HEADER cl/embedded_kernels.hpp NAMESPACE fp4cl::detail FUNCTION embedded_kernel_files
  TYPE EmbeddedFile GENERATOR EmbedKernels.cmake OUTPUT ${OUTPUT})
