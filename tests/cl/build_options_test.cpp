// BuildOptions: the canonical option string (equal sets give equal strings, hence equal cache
// keys) and the rejection of names, values and flags that would not reach the compiler intact.
#include <gtest/gtest.h>

#include <string>

#include "fp4cl/error.hpp"
#include "fp4cl/program_cache.hpp"
#include "support/errors.hpp"

namespace fp4cl {
namespace {

using test::error_of;

TEST(BuildOptions, EmptyIsEmpty) { EXPECT_EQ(BuildOptions().str(), ""); }

TEST(BuildOptions, CanonicalOrderDefinesByNameThenFlags) {
  BuildOptions a;
  a.flag("-cl-mad-enable").define("TILE_N", 16).define("ACC", "float").flag("-cl-fast-relaxed-math").define("K", -3);
  EXPECT_EQ(a.str(), "-DACC=float -DK=-3 -DTILE_N=16 -cl-fast-relaxed-math -cl-mad-enable");
  BuildOptions b;
  b.define("K", -3).flag("-cl-fast-relaxed-math").define("TILE_N", 16).flag("-cl-mad-enable").define("ACC", "float");
  EXPECT_EQ(a.str(), b.str());
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a != b);
}

TEST(BuildOptions, DefineWithoutValueIsOne) { EXPECT_EQ(BuildOptions().define("FP4CL_DIV_VIA_FP64").str(), "-DFP4CL_DIV_VIA_FP64=1"); }

TEST(BuildOptions, RedefiningReplacesAndRepeatedFlagsCollapse) {
  BuildOptions o;
  o.define("TILE", 8).define("TILE", 16).flag("-cl-mad-enable").flag("-cl-mad-enable");
  EXPECT_EQ(o.str(), "-DTILE=16 -cl-mad-enable");
  EXPECT_TRUE(o != BuildOptions().define("TILE", 8).flag("-cl-mad-enable"));
}

TEST(BuildOptions, LargeIntegersAreExact) {
  EXPECT_EQ(BuildOptions().define("BIG", 9007199254740993LL).str(), "-DBIG=9007199254740993");
}

TEST(BuildOptions, RejectsNamesThatAreNotIdentifiers) {
  for (const char* name : {"", "1TILE", "TILE N", "TILE=4", "TILE-N", "TILE\"", "-DTILE", "T\n"}) {
    const std::string message = error_of([&] { BuildOptions().define(name, 1); });
    EXPECT_NE(message.find("is not a valid macro name"), std::string::npos) << "name '" << name << "': " << message;
  }
  EXPECT_NO_THROW(BuildOptions().define("_tile_n2", 1));
}

TEST(BuildOptions, RejectsValuesThatAreNotOneToken) {
  for (const char* value : {"", "a b", "\"x\"", "'x'", "a\\b", "x\n", "tab\there"}) {
    const std::string message = error_of([&] { BuildOptions().define("TILE", value); });
    EXPECT_NE(message.find("BuildOptions::define(TILE): the value"), std::string::npos)
        << "value '" << value << "': " << message;
  }
  EXPECT_NO_THROW(BuildOptions().define("EXPR", "(1<<4)"));
  EXPECT_NO_THROW(BuildOptions().define("SCALE", "0.5f"));
}

TEST(BuildOptions, RejectsFlagsThatAreNotOneCompilerFlag) {
  for (const char* flag : {"", "cl-mad-enable", "-cl-mad-enable -cl-fast-relaxed-math", "-cl-std=\"CL1.2\""}) {
    const std::string message = error_of([&] { BuildOptions().flag(flag); });
    EXPECT_NE(message.find("is not one compiler flag"), std::string::npos) << "flag '" << flag << "': " << message;
  }
  std::string message = error_of([] { BuildOptions().flag("-DTILE=4"); });
  EXPECT_NE(message.find("use BuildOptions::define"), std::string::npos) << message;
  message = error_of([] { BuildOptions().flag("-I/usr/include"); });
  EXPECT_NE(message.find("kernel includes are resolved from the embedded kernel files"), std::string::npos) << message;
  EXPECT_NO_THROW(BuildOptions().flag("-cl-fp32-correctly-rounded-divide-sqrt"));
}

// A flag with its argument (NVIDIA's -cl-nv-maxrregcount <N>) stays one entry: sorted as one,
// written as two words, repeated once; the argument is one word that is not itself a flag, and
// the flag obeys the rules of a flag alone.
TEST(BuildOptions, FlagsWithAnArgumentStayTogether) {
  BuildOptions o;
  o.flag("-w").flag("-cl-nv-maxrregcount", "64").define("TILE", 4).flag("-cl-nv-maxrregcount", "64").flag("-a");
  EXPECT_EQ(o.str(), "-DTILE=4 -a -cl-nv-maxrregcount 64 -w");
  EXPECT_TRUE(o != BuildOptions().flag("-w").flag("-cl-nv-maxrregcount", "32").define("TILE", 4).flag("-a"));
  for (const char* value : {"", "-w", "6 4", "'64'", "a\\b"}) {
    const std::string message = error_of([&] { BuildOptions().flag("-cl-nv-maxrregcount", value); });
    EXPECT_NE(message.find("BuildOptions::flag(-cl-nv-maxrregcount): the argument"), std::string::npos)
        << "value '" << value << "': " << message;
  }
  EXPECT_NE(error_of([] { BuildOptions().flag("-DTILE", "4"); }).find("use BuildOptions::define"), std::string::npos);
  EXPECT_NE(error_of([] { BuildOptions().flag("maxrregcount", "4"); }).find("is not one compiler flag"),
            std::string::npos);
}

TEST(BuildOptions, ARejectedCallLeavesTheOptionsUnchanged) {
  BuildOptions o;
  o.define("TILE", 4);
  EXPECT_THROW(o.define("TILE", "a b"), Error);
  EXPECT_THROW(o.flag("bad"), Error);
  EXPECT_EQ(o.str(), "-DTILE=4");
}

}  // namespace
}  // namespace fp4cl
