// A shared BF16 source model for the quantizer tests (written once per test suite) and a fresh
// scratch directory per test.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "checkpoint_write/checkpoint_write_test_util.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl::test {

class QuantizeModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_dir_ = std::make_unique<TempDir>("fp4cl-quantize-src");
    write_synthetic_model(source(), tiny_model());
    std::ofstream(source() / "tokenizer.json") << R"({"version": "1.0", "model": {"type": "BPE"}})";
    std::ofstream(source() / "generation_config.json") << R"({"bos_token_id": 151643})";
    std::filesystem::create_directory(source() / "original");
    std::ofstream(source() / "original" / "params.json") << "{}";
  }
  static void TearDownTestSuite() { suite_dir_.reset(); }
  void SetUp() override { scratch_ = std::make_unique<TempDir>("fp4cl-quantize-out"); }

  // The tiny synthetic model (BF16) with a tokenizer, a generation config and a subdirectory.
  static std::filesystem::path source() { return suite_dir_->path() / "src"; }
  const TempDir& scratch() const { return *scratch_; }

  // The linear modules the default patterns leave unquantized: the routers and lm_head.
  static const std::set<std::string>& expected_ignored() {
    static const std::set<std::string> ignored = {"lm_head", "model.layers.0.mlp.gate",
                                                  "model.layers.1.mlp.gate"};
    return ignored;
  }

 private:
  static inline std::unique_ptr<TempDir> suite_dir_;
  std::unique_ptr<TempDir> scratch_;
};

}  // namespace fp4cl::test
