#include "deepinfer/status.h"

namespace deepinfer {

std::string Status::to_string() const {
  const char* name = "ok";
  switch (code_) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: name = "invalid argument"; break;
    case Code::kNotFound: name = "not found"; break;
    case Code::kIoError: name = "io error"; break;
    case Code::kCorrupt: name = "corrupt"; break;
    case Code::kUnsupported: name = "unsupported"; break;
    case Code::kInternal: name = "internal"; break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace deepinfer
