// fp4cl reports every failure with one exception type: what was being done, and for OpenCL
// failures the status code and its name. Library code never aborts.
#pragma once

#include <stdexcept>
#include <string>

namespace fp4cl {

class Error : public std::runtime_error {
 public:
  // `message` says what was being done and what went wrong. `cl_status` is the OpenCL status
  // (CL_SUCCESS = 0 when the error did not come from OpenCL).
  explicit Error(const std::string& message, int cl_status = 0);

  // The OpenCL status that caused the error, or 0 (CL_SUCCESS) when it did not come from OpenCL.
  int cl_status() const noexcept { return cl_status_; }

 private:
  int cl_status_;
};

// The symbolic name of an OpenCL status ("CL_OUT_OF_RESOURCES"), or "CL_UNKNOWN_ERROR(<n>)".
std::string cl_status_name(int status);

}  // namespace fp4cl
