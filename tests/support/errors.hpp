// Checks on the fp4cl::Error a piece of code throws (its message must name what is wrong).
//
//   EXPECT_EQ(error_of([&] { layer.run(x, 9, y); }), "(no error)");
//   EXPECT_ERROR_HAS(make_layer(bad), "w13_scales");
//   expect_error([&] { load(dir); }, {"config.json", "quant_algo"});
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "fp4cl/error.hpp"

namespace fp4cl::test {

// The message of the fp4cl::Error that f() throws, or "(no error)" when it throws none (any other
// exception passes through).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Runs f(), which must throw fp4cl::Error with a message containing every one of `parts`; returns
// the message ("" after a failure when f() throws none).
template <typename F, typename Parts>
std::string expect_error_parts(F&& f, const Parts& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "expected \"" << part << "\" in: " << message;
    }
    return message;
  }
  const std::string first = std::empty(parts) ? std::string() : std::string(*std::begin(parts));
  ADD_FAILURE() << "expected an fp4cl::Error mentioning \"" << first << "\"";
  return "";
}
template <typename F>
std::string expect_error(F&& f, std::initializer_list<std::string_view> parts) {
  return expect_error_parts(f, parts);
}
template <typename F>
std::string expect_error(F&& f, const std::vector<std::string>& parts) {
  return expect_error_parts(f, parts);
}

}  // namespace fp4cl::test

// `call` (a statement) throws fp4cl::Error whose message contains `text`.
#define EXPECT_ERROR_HAS(call, text)                                              \
  do {                                                                            \
    const std::string message_ = ::fp4cl::test::error_of([&] { call; });          \
    EXPECT_NE(message_.find(text), std::string::npos) << message_;                \
  } while (0)
