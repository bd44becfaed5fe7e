// deepinfer command-line interface. Uses only the public API in include/deepinfer/.
//
//   deepinfer logits   [--model DIR] --ids 5,17,42 [--chunk N] --out FILE
//   deepinfer generate [--model DIR] --prompt-ids 5,17,42 --max-tokens N [--chunk N] [--ignore-eos]
//   deepinfer tokenize   (--tokenizer FILE | --model DIR) (--text TEXT | --jsonl IN) [--add-special-tokens]
//   deepinfer detokenize (--tokenizer FILE | --model DIR) (--ids 1,2,3 | --jsonl IN) [--skip-special-tokens]
#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/model.h"
#include "deepinfer/tokenizer.h"

namespace {

using deepinfer::Status;

const char* kUsage =
    "usage:\n"
    "  deepinfer logits   [--model DIR] --ids 5,17,42 [--chunk N] --out FILE\n"
    "      writes the logits of every position as little-endian float32 [T, V] and prints \"T V\"\n"
    "      --chunk N feeds the prompt N tokens at a time through the decode state (1: token by token)\n"
    "  deepinfer generate [--model DIR] --prompt-ids 5,17,42 --max-tokens N [--chunk N] [--ignore-eos]\n"
    "      greedy continuation; prints {\"token_ids\": [...]}\n"
    "  deepinfer tokenize   (--tokenizer FILE | --model DIR) (--text TEXT | --jsonl IN) [--add-special-tokens]\n"
    "      prints one JSON line {\"ids\": [...]} per input (JSONL lines carry \"text\"), in order\n"
    "  deepinfer detokenize (--tokenizer FILE | --model DIR) (--ids 1,2,3 | --jsonl IN) [--skip-special-tokens]\n"
    "      prints one JSON line {\"text\": \"...\"} per input (JSONL lines carry \"ids\")\n"
    "Without --model the embedded default model is used (random weights, for trying the engine).\n";

struct Args {
  std::string command;
  std::map<std::string, std::string> opts;
  std::vector<std::string> flags;
};

bool parse_args(int argc, char** argv, Args* a, std::string* err) {
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
    if (s == "--ignore-eos" || s == "--help" || s == "--add-special-tokens" || s == "--skip-special-tokens") {
      a->flags.push_back(s);
      continue;
    }
    if (i + 1 >= argc) {
      *err = "option " + s + " needs a value";
      return false;
    }
    a->opts[s] = argv[++i];
  }
  return true;
}

bool parse_int(const std::string& s, long long lo, long long hi, long long* out) {
  const char* b = s.data();
  const char* e = b + s.size();
  auto [p, ec] = std::from_chars(b, e, *out);
  return ec == std::errc() && p == e && *out >= lo && *out <= hi;
}

Status parse_ids(const std::string& text, const char* option, std::vector<int32_t>* ids) {
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

deepinfer::Result<std::unique_ptr<deepinfer::Model>> open_model(const Args& a) {
  auto it = a.opts.find("--model");
  if (it == a.opts.end()) {
    auto m = deepinfer::Model::load_default();
    if (m.is_ok()) std::fprintf(stderr, "deepinfer: no --model given; using the %s\n", (*m)->info().description.c_str());
    return m;
  }
  return deepinfer::Model::load(it->second);
}

int fail(const Status& s) {
  std::fprintf(stderr, "deepinfer: error: %s\n", s.to_string().c_str());
  return 1;
}

Status check_known(const Args& a, std::initializer_list<const char*> known) {
  for (const auto& [k, v] : a.opts) {
    bool ok = false;
    for (const char* n : known) ok = ok || k == n;
    if (!ok) return Status::invalid_argument("unknown option " + k + " for '" + a.command + "'");
  }
  return Status::ok();
}

int run_logits(const Args& a) {
  if (Status s = check_known(a, {"--model", "--ids", "--chunk", "--out"}); !s.is_ok()) return fail(s);
  if (!a.opts.count("--ids")) return fail(Status::invalid_argument("logits: --ids is required"));
  if (!a.opts.count("--out")) return fail(Status::invalid_argument("logits: --out is required"));
  std::vector<int32_t> ids;
  if (Status s = parse_ids(a.opts.at("--ids"), "--ids", &ids); !s.is_ok()) return fail(s);
  long long chunk = 0;
  if (a.opts.count("--chunk") && !parse_int(a.opts.at("--chunk"), 1, 1 << 30, &chunk))
    return fail(Status::invalid_argument("--chunk must be a positive integer"));
  auto model = open_model(a);
  if (!model.is_ok()) return fail(model.status());
  const int V = (*model)->info().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= V)
      return fail(Status::invalid_argument("--ids: token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                           " is outside the vocabulary [0, " + std::to_string(V) + ")"));
  auto session = (*model)->new_session();
  std::vector<float> all, part;
  const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : ids.size();
  for (size_t b = 0; b < ids.size(); b += step) {
    const size_t n = std::min(step, ids.size() - b);
    if (Status s = (*model)->forward(*session, std::span<const int32_t>(ids).subspan(b, n), &part); !s.is_ok())
      return fail(s);
    all.insert(all.end(), part.begin(), part.end());
  }
  const std::string& out = a.opts.at("--out");
  std::ofstream f(out, std::ios::binary);
  if (!f) return fail(Status::io_error("cannot open " + out + " for writing"));
  f.write(reinterpret_cast<const char*>(all.data()), static_cast<std::streamsize>(all.size() * sizeof(float)));
  if (!f) return fail(Status::io_error("writing " + out + " failed"));
  std::printf("%zu %d\n", ids.size(), V);
  return 0;
}

int run_generate(const Args& a) {
  if (Status s = check_known(a, {"--model", "--prompt-ids", "--max-tokens", "--chunk"}); !s.is_ok()) return fail(s);
  if (!a.opts.count("--prompt-ids")) return fail(Status::invalid_argument("generate: --prompt-ids is required"));
  std::vector<int32_t> ids;
  if (Status s = parse_ids(a.opts.at("--prompt-ids"), "--prompt-ids", &ids); !s.is_ok()) return fail(s);
  long long max_tokens = 16, chunk = 0;
  if (a.opts.count("--max-tokens") && !parse_int(a.opts.at("--max-tokens"), 1, 1 << 30, &max_tokens))
    return fail(Status::invalid_argument("--max-tokens must be a positive integer"));
  if (a.opts.count("--chunk") && !parse_int(a.opts.at("--chunk"), 1, 1 << 30, &chunk))
    return fail(Status::invalid_argument("--chunk must be a positive integer"));
  bool ignore_eos = false;
  for (const auto& f : a.flags) ignore_eos = ignore_eos || f == "--ignore-eos";
  auto model = open_model(a);
  if (!model.is_ok()) return fail(model.status());
  auto toks = (*model)->generate_greedy(ids, static_cast<int>(max_tokens), static_cast<int>(chunk), !ignore_eos);
  if (!toks.is_ok()) return fail(toks.status());
  std::string out = "{\"token_ids\": [";
  for (size_t i = 0; i < toks->size(); ++i) out += (i ? ", " : "") + std::to_string((*toks)[i]);
  out += "]}";
  std::printf("%s\n", out.c_str());
  return 0;
}

bool has_flag(const Args& a, const char* flag) {
  return std::find(a.flags.begin(), a.flags.end(), flag) != a.flags.end();
}

deepinfer::Result<std::unique_ptr<deepinfer::Tokenizer>> open_tokenizer(const Args& a) {
  if (a.opts.count("--tokenizer")) return deepinfer::Tokenizer::from_file(a.opts.at("--tokenizer"));
  if (a.opts.count("--model")) return deepinfer::Tokenizer::from_file(a.opts.at("--model") + "/tokenizer.json");
  return Status::invalid_argument(a.command + ": give --tokenizer FILE or --model DIR");
}

// One JSON object per line in the `{"key": value}` style of the CLI's documentation.
std::string dump(const nlohmann::json& j) {
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      out += (first ? "" : ", ") + nlohmann::json(it.key()).dump() + ": ";
      first = false;
      if (it.value().is_array()) {
        out += "[";
        for (size_t i = 0; i < it.value().size(); ++i) out += (i ? ", " : "") + it.value()[i].dump();
        out += "]";
      } else {
        out += it.value().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      }
    }
    return out + "}";
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Runs `fn` on every input (--text/--ids value, or each JSONL line's `field`); prints one JSON line
// each. A bad JSONL line prints {"error": ...} in its place; the exit status is then 1.
template <typename Fn>
int for_each_input(const Args& a, const char* inline_opt, const char* field, Fn&& fn) {
  const bool has_inline = a.opts.count(inline_opt) > 0, has_jsonl = a.opts.count("--jsonl") > 0;
  if (has_inline == has_jsonl)
    return fail(Status::invalid_argument(a.command + ": give exactly one of " + inline_opt + " or --jsonl"));
  if (has_inline) {
    auto out = fn(nlohmann::json(a.opts.at(inline_opt)), std::string(inline_opt));
    if (!out.is_ok()) return fail(out.status());
    std::printf("%s\n", dump(out.value()).c_str());
    return 0;
  }
  std::ifstream in(a.opts.at("--jsonl"));
  if (!in) return fail(Status::not_found("cannot read " + a.opts.at("--jsonl")));
  std::string line;
  int line_no = 0, errors = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const std::string where = a.opts.at("--jsonl") + ":" + std::to_string(line_no);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    deepinfer::Result<nlohmann::json> out = Status::invalid_argument(where + ": not a JSON object with \"" + field + "\"");
    if (!j.is_discarded() && j.is_object() && j.contains(field)) out = fn(j[field], where);
    if (out.is_ok()) {
      std::printf("%s\n", dump(out.value()).c_str());
    } else {
      ++errors;
      std::printf("%s\n", dump({{"error", out.status().to_string()}}).c_str());
      std::fprintf(stderr, "deepinfer: error: %s\n", out.status().to_string().c_str());
    }
  }
  return errors ? 1 : 0;
}

int run_tokenize(const Args& a) {
  if (Status s = check_known(a, {"--tokenizer", "--model", "--text", "--jsonl"}); !s.is_ok()) return fail(s);
  auto tok = open_tokenizer(a);
  if (!tok.is_ok()) return fail(tok.status());
  const bool add_special = has_flag(a, "--add-special-tokens");
  return for_each_input(a, "--text", "text", [&](const nlohmann::json& v, const std::string& where) -> deepinfer::Result<nlohmann::json> {
    if (!v.is_string()) return Status::invalid_argument(where + ": \"text\" must be a string");
    auto ids = (*tok)->encode(v.get<std::string>(), add_special);
    if (!ids.is_ok()) return ids.status().with_context(where);
    return nlohmann::json{{"ids", ids.value()}};
  });
}

int run_detokenize(const Args& a) {
  if (Status s = check_known(a, {"--tokenizer", "--model", "--ids", "--jsonl"}); !s.is_ok()) return fail(s);
  auto tok = open_tokenizer(a);
  if (!tok.is_ok()) return fail(tok.status());
  const bool skip = has_flag(a, "--skip-special-tokens");
  return for_each_input(a, "--ids", "ids", [&](const nlohmann::json& v, const std::string& where) -> deepinfer::Result<nlohmann::json> {
    std::vector<int32_t> ids;
    if (v.is_string()) {
      if (Status s = parse_ids(v.get<std::string>(), "--ids", &ids); !s.is_ok()) return s;
    } else if (v.is_array()) {
      for (const auto& x : v) {
        if (!x.is_number_integer() || x.get<int64_t>() < INT32_MIN || x.get<int64_t>() > INT32_MAX)
          return Status::invalid_argument(where + ": \"ids\" must be an array of integers");
        ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
    } else {
      return Status::invalid_argument(where + ": \"ids\" must be an array of integers");
    }
    auto text = (*tok)->decode(ids, skip);
    if (!text.is_ok()) return text.status().with_context(where);
    return nlohmann::json{{"text", text.value()}};
  });
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::string err;
  if (!parse_args(argc, argv, &a, &err)) {
    std::fprintf(stderr, "deepinfer: %s\n%s", err.c_str(), kUsage);
    return 2;
  }
  for (const auto& f : a.flags)
    if (f == "--help") {
      std::printf("%s", kUsage);
      return 0;
    }
  if (a.command == "logits") return run_logits(a);
  if (a.command == "generate") return run_generate(a);
  if (a.command == "tokenize") return run_tokenize(a);
  if (a.command == "detokenize") return run_detokenize(a);
  if (a.command == "help" || a.command == "--help") {
    std::printf("%s", kUsage);
    return 0;
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n%s", a.command.c_str(), kUsage);
  return 2;
}
