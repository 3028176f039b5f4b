// Building programs: defines and flags reach the compiler, a failed compile reports the status
// and the compiler's own words, kernels are created by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fp4cl/error.hpp"
#include "fp4cl/program_cache.hpp"
#include "int_kernel.hpp"
#include "memory_sources.hpp"
#include "support/test_context.hpp"

namespace fp4cl {
namespace {

const char* kOptionsSource = R"(
#ifndef TILE
#error TILE must be defined
#endif
__kernel void report(__global int* out) {
  out[0] = TILE;
  out[1] = WIDTH;
#ifdef __FAST_RELAXED_MATH__
  out[2] = 1;
#else
  out[2] = 0;
#endif
}
)";

const char* kBrokenMain = "#include \"inc/helper.cl\"\n__kernel void k(__global int* out) { out[0] = helper(); }\n";
const char* kBrokenHelper = "int helper(void) {\n  return undeclared_thing;\n}\n";

const char* kTwoKernels = R"(
__kernel void alpha(__global int* out) { out[0] = 1; }
__kernel void beta(__global int* out) { out[0] = 2; }
)";

ProgramCache& programs() {
  const Context& ctx = test::shared_context();
  static ProgramCache cache(ctx.opencl_context(), ctx.device(), ctx.info(), "",
                            test::memory_sources({{"options.cl", kOptionsSource},
                                                  {"broken.cl", kBrokenMain},
                                                  {"inc/helper.cl", kBrokenHelper},
                                                  {"two.cl", kTwoKernels}}));
  return cache;
}

TEST(ProgramBuild, DefinesAndFlagsReachTheCompiler) {
  const Context& ctx = test::shared_context();
  const BuildOptions tuned = BuildOptions().define("TILE", 16).define("WIDTH", -3).flag("-cl-fast-relaxed-math");
  EXPECT_EQ(test::run_int_kernel(ctx, programs().kernel("options.cl", "report", tuned), 3),
            (std::vector<cl_int>{16, -3, 1}));
  const BuildOptions plain = BuildOptions().define("TILE", 4).define("WIDTH", 0);
  EXPECT_EQ(test::run_int_kernel(ctx, programs().kernel("options.cl", "report", plain), 3),
            (std::vector<cl_int>{4, 0, 0}));
}

TEST(ProgramBuild, CompileFailureCarriesTheStatusAndTheCompilersLog) {
  const BuildOptions options = BuildOptions().define("TILE", 2);
  try {
    programs().program("broken.cl", options);
    FAIL() << "building a broken program did not throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.cl_status(), CL_BUILD_PROGRAM_FAILURE);
    EXPECT_NE(message.find("building broken.cl with options \"-DTILE=2\""), std::string::npos) << message;
    EXPECT_NE(message.find(test::shared_context().info().name), std::string::npos) << message;
    EXPECT_NE(message.find("CL_BUILD_PROGRAM_FAILURE (-11)"), std::string::npos) << message;
    EXPECT_NE(message.find("build log:\n"), std::string::npos) << message;
    // The compiler's diagnostic. PoCL's clang honours the file names of the #line directives
    // and locates it in the included file ("inc/helper.cl:2:"); NVIDIA's compiler ignores them
    // and reports "<kernel>:N:", so the location is checked only where file names are honoured.
    EXPECT_NE(message.find("undeclared_thing"), std::string::npos) << message;
    if (message.find("<kernel>:") == std::string::npos) {
      EXPECT_TRUE(message.find("inc/helper.cl:2:") != std::string::npos ||
                  message.find("inc/helper.cl(2)") != std::string::npos)
          << message;
    }
  }
  // A failure is not cached: the next request compiles again and fails again.
  const ProgramCacheStats before = programs().stats();
  EXPECT_THROW(programs().program("broken.cl", options), Error);
  const ProgramCacheStats after = programs().stats();
  EXPECT_EQ(after.memory_hits, before.memory_hits);
  EXPECT_EQ(after.source_builds, before.source_builds);
}

TEST(ProgramBuild, PreprocessorErrorsAppearInTheLog) {
  try {
    programs().program("options.cl", BuildOptions().define("WIDTH", 1));
    FAIL() << "building without TILE did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TILE must be defined"), std::string::npos) << e.what();
  }
}

TEST(ProgramBuild, KernelsAreCreatedByNameEachCallANewObject) {
  const cl::Kernel a1 = programs().kernel("two.cl", "alpha");
  const cl::Kernel a2 = programs().kernel("two.cl", "alpha");
  EXPECT_NE(a1(), a2());
  EXPECT_EQ(a1.getInfo<CL_KERNEL_PROGRAM>()(), a2.getInfo<CL_KERNEL_PROGRAM>()());
  EXPECT_EQ(test::run_int_kernel(test::shared_context(), programs().kernel("two.cl", "beta"), 1),
            std::vector<cl_int>{2});
}

TEST(ProgramBuild, UnknownKernelNameListsTheProgramsKernels) {
  try {
    programs().kernel("two.cl", "gamma");
    FAIL() << "creating a missing kernel did not throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.cl_status(), CL_INVALID_KERNEL_NAME);
    EXPECT_NE(message.find("creating kernel gamma from two.cl: CL_INVALID_KERNEL_NAME"), std::string::npos) << message;
    EXPECT_NE(message.find("alpha"), std::string::npos) << message;
    EXPECT_NE(message.find("beta"), std::string::npos) << message;
  }
}

TEST(ProgramBuild, MissingKernelFileIsNamed) {
  try {
    programs().program("absent.cl");
    FAIL() << "building a missing file did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no kernel source named 'absent.cl'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4cl
