// `#include "..."` resolution of kernel sources, against in-memory kernel tables (the embedded
// table is the same code with the library's files).
#include <gtest/gtest.h>

#include <string>

#include "memory_sources.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/program_cache.hpp"
#include "support/errors.hpp"

namespace fp4cl {
namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

std::string error_of(const std::string& file, const KernelSources& sources) {
  return test::error_of([&] { kernel_source(file, sources); });
}

TEST(KernelSource, ResolvesNestedIncludesInOrder) {
  const auto sources = test::memory_sources({
      {"main.cl", "// main\n#include \"lib/b.cl\"\nint main_marker;\n"},
      {"lib/b.cl", "  #  include \"lib/c.cl\"\nint b_marker;\n"},
      {"lib/c.cl", "int c_marker;"},  // no final newline
  });
  const std::string text = kernel_source("main.cl", sources);
  EXPECT_EQ(count(text, "#include"), 0u) << text;
  const std::size_t c = text.find("int c_marker;\n"), b = text.find("int b_marker;"), m = text.find("int main_marker;");
  ASSERT_NE(c, std::string::npos) << text;
  ASSERT_NE(b, std::string::npos) << text;
  ASSERT_NE(m, std::string::npos) << text;
  EXPECT_LT(c, b);
  EXPECT_LT(b, m);
  EXPECT_LT(text.find("// main"), c);
}

TEST(KernelSource, LineDirectivesKeepFilesAndLinesRight) {
  const auto sources = test::memory_sources({
      {"main.cl", "// line 1\n#include \"inc.cl\"\nint line3;\n"},
      {"inc.cl", "int inc_line1;\n"},
  });
  EXPECT_EQ(kernel_source("main.cl", sources),
            "#line 1 \"main.cl\"\n"
            "// line 1\n"
            "#line 1 \"inc.cl\"\n"
            "int inc_line1;\n"
            "#line 3 \"main.cl\"\n"
            "int line3;\n");
}

TEST(KernelSource, IncludesEachFileOnce) {
  const auto sources = test::memory_sources({
      {"main.cl", "#include \"a.cl\"\n#include \"b.cl\"\n#include \"a.cl\"\n"},
      {"a.cl", "#include \"common.cl\"\nint a_marker;\n"},
      {"b.cl", "#include \"common.cl\"\nint b_marker;\n"},
      {"common.cl", "int common_marker;\n"},
  });
  const std::string text = kernel_source("main.cl", sources);
  EXPECT_EQ(count(text, "common_marker"), 1u) << text;
  EXPECT_EQ(count(text, "a_marker"), 1u) << text;
  EXPECT_EQ(count(text, "b_marker"), 1u) << text;
  EXPECT_LT(text.find("common_marker"), text.find("a_marker"));
}

TEST(KernelSource, IncludeCyclesTerminate) {
  const auto sources = test::memory_sources({
      {"a.cl", "#include \"b.cl\"\nint a_marker;\n"},
      {"b.cl", "#include \"a.cl\"\nint b_marker;\n"},
  });
  const std::string text = kernel_source("a.cl", sources);
  EXPECT_EQ(count(text, "a_marker"), 1u);
  EXPECT_EQ(count(text, "b_marker"), 1u);
  EXPECT_LT(text.find("b_marker"), text.find("a_marker"));
}

TEST(KernelSource, LeavesAngleAndMacroIncludesToTheCompiler) {
  // kernels/common files include C++ headers in host-only branches.
  const auto sources = test::memory_sources({
      {"a.cl", "#ifndef __OPENCL_VERSION__\n#include <cmath>\n#endif\n#include HEADER\n#include_next \"x\"\n"},
  });
  const std::string text = kernel_source("a.cl", sources);
  EXPECT_NE(text.find("#include <cmath>\n"), std::string::npos) << text;
  EXPECT_NE(text.find("#include HEADER\n"), std::string::npos) << text;
  EXPECT_NE(text.find("#include_next \"x\"\n"), std::string::npos) << text;
}

TEST(KernelSource, MissingTopLevelFileIsNamed) {
  const std::string message = error_of("absent.cl", test::memory_sources({{"a.cl", ""}}));
  EXPECT_NE(message.find("no kernel source named 'absent.cl'"), std::string::npos) << message;
}

TEST(KernelSource, MissingIncludeNamesTheIncluderAndLine) {
  const auto sources = test::memory_sources({
      {"main.cl", "#include \"lib/b.cl\"\n"},
      {"lib/b.cl", "int x;\n\n#include \"lib/missing.cl\"\n"},
  });
  const std::string message = error_of("main.cl", sources);
  EXPECT_NE(message.find("kernel source lib/b.cl (line 3) includes 'lib/missing.cl'"), std::string::npos) << message;
}

TEST(KernelSource, MalformedIncludeIsAnError) {
  for (const char* line : {"#include \"unterminated.cl\n", "#include \"\"\n", "#include\n"}) {
    const std::string message = error_of("a.cl", test::memory_sources({{"a.cl", std::string("int x;\n") + line}}));
    EXPECT_NE(message.find("kernel source a.cl line 2: malformed #include"), std::string::npos) << message;
  }
}

TEST(KernelSource, EmbeddedTableHoldsTheLibraryKernels) {
  const KernelSources embedded = embedded_kernel_sources();
  ASSERT_TRUE(embedded("common/formats.cl").has_value());
  EXPECT_FALSE(embedded("common/no_such_file.cl").has_value());
  // quant_recipe.cl includes formats.cl: resolved from the embedded table, once.
  const std::string text = kernel_source("common/quant_recipe.cl");
  EXPECT_EQ(count(text, "#include \"common/formats.cl\""), 0u);
  EXPECT_EQ(count(text, "#line 1 \"common/formats.cl\""), 1u);
  EXPECT_EQ(count(text, "#define FP4CL_COMMON_FORMATS_CL"), 1u);
  const std::string message = error_of("no_such_kernel.cl", embedded);
  EXPECT_NE(message.find("'no_such_kernel.cl'"), std::string::npos) << message;
}

}  // namespace
}  // namespace fp4cl
