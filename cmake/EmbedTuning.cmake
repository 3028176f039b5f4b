# Turns every .json file under TUNING_DIR (the tuning databases shipped with the repository) into
# one C++ source (OUTPUT) that holds them as string literals, keyed by "tuning/<file name>"
# (host/tuning/embedded_tuning.hpp). The library merges them at start (host/tuning/tuning_store.cpp).
include(${CMAKE_CURRENT_LIST_DIR}/EmbedTextFiles.cmake)
fp4cl_embed_text_files(SOURCES "tuning/*.json" DIR ${TUNING_DIR} PATTERN *.json RECURSE OFF KEY_PREFIX "tuning/"
  HEADER tuning/embedded_tuning.hpp NAMESPACE fp4cl::tuning FUNCTION embedded_databases
  TYPE EmbeddedDatabase GENERATOR EmbedTuning.cmake OUTPUT ${OUTPUT})
