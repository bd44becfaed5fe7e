// Argument parsing shared by the CLI's commands.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer_cli {

using deepinfer::Status;

struct Args {
  std::string command;
  std::map<std::string, std::string> opts;
  std::vector<std::string> flags;
  std::vector<std::string> stops;  // --stop may repeat
};

inline bool parse_args(int argc, char** argv, Args* a, std::string* err) {
  if (argc < 2) {
    *err = "missing command";
    return false;
  }
  a->command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0) {
      *err = "unexpected argument '" + s + "'";
      return false;
    }
    if (s == "--ignore-eos" || s == "--help" || s == "--add-special-tokens" || s == "--skip-special-tokens" ||
        s == "--chat" || s == "--no-async" || s == "--progress" || s == "--no-progress" || s == "--keep-special-tokens") {
      a->flags.push_back(s);
      continue;
    }
    if (i + 1 >= argc) {
      *err = "option " + s + " needs a value";
      return false;
    }
    if (s == "--stop") {
      a->stops.push_back(argv[++i]);
      continue;
    }
    if (a->opts.count(s)) {
      *err = "option " + s + " given twice";
      return false;
    }
    a->opts[s] = argv[++i];
  }
  return true;
}

inline bool parse_int(const std::string& s, long long lo, long long hi, long long* out) {
  const char* b = s.data();
  const char* e = b + s.size();
  auto [p, ec] = std::from_chars(b, e, *out);
  return ec == std::errc() && p == e && *out >= lo && *out <= hi;
}

inline Status parse_ids(const std::string& text, const char* option, std::vector<int32_t>* ids) {
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    long long v = 0;
    if (!parse_int(item, 0, 2147483647LL, &v))
      return Status::invalid_argument(std::string(option) + ": '" + item + "' is not a non-negative token id");
    ids->push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (ids->empty()) return Status::invalid_argument(std::string(option) + ": no token ids given");
  return Status::ok();
}

inline int fail(const Status& s) {
  std::fprintf(stderr, "deepinfer: error: %s\n", s.to_string().c_str());
  return 1;
}

inline Status check_known(const Args& a, std::initializer_list<const char*> known) {
  for (const auto& [k, v] : a.opts) {
    bool ok = false;
    for (const char* n : known) ok = ok || k == n;
    if (!ok) return Status::invalid_argument("unknown option " + k + " for '" + a.command + "'");
  }
  return Status::ok();
}

inline bool has_flag(const Args& a, const char* flag) {
  return std::find(a.flags.begin(), a.flags.end(), flag) != a.flags.end();
}


int run_generate(const Args& a);
int run_perplexity(const Args& a, const std::string& default_model_dir);

// The default model: the trained model folder of the source tree (a compile-time path), if it is
// there; empty otherwise (then the engine's embedded random-weight model is used).
inline std::string default_model_dir() {
#ifdef DEEPINFER_DEFAULT_MODEL_DIR
  const std::string dir = DEEPINFER_DEFAULT_MODEL_DIR;
  if (FILE* f = std::fopen((dir + "/config.json").c_str(), "r")) {
    std::fclose(f);
    return dir;
  }
#endif
  return std::string();
}

}  // namespace deepinfer_cli
