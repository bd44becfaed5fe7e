// deepinfer command-line interface. Uses only the public API in include/deepinfer/.
//
//   deepinfer logits   [--model DIR] --ids 5,17,42 [--chunk N] --out FILE
//   deepinfer generate [--model DIR] (--prompt TEXT | --prompt-ids IDS | --prompts IN.jsonl) [sampling flags] [--out OUT]
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

#include "apps/cli/args.h"
#include "deepinfer/model.h"
#include "deepinfer/tokenizer.h"

namespace deepinfer_cli {

const char* kUsage =
    "usage:\n"
    "  deepinfer generate [--model DIR] (--prompt TEXT | --prompt-ids 5,17,42 | --prompts IN.jsonl) [--chat]\n"
    "                     [--temperature F] [--top-p F] [--top-k N] [--min-p F] [--repetition-penalty F]\n"
    "                     [--presence-penalty F] [--frequency-penalty F] [--seed N] [--max-tokens N] [--min-tokens N]\n"
    "                     [--stop S]... [--stop-token-ids 1,2] [--ignore-eos] [--logprobs N] [--keep-special-tokens]\n"
    "                     [--out OUT.jsonl] [--max-num-seqs N] [--max-num-batched-tokens N] [--chunk N]\n"
    "                     [--cache-mib N] [--block-size N] [--max-model-len N] [--threads N] [--no-async]\n"
    "                     [--numerics auto|exact|release] [--kv-cache-dtype auto|float32|bfloat16|fp8]\n"
    "                     [--device cpu|cuda] [--progress | --no-progress]\n"
    "      batch generation; one JSON line per input, in input order: index, text, token_ids,\n"
    "      finish_reason, logprobs (if asked), seed, timings. JSONL lines carry \"prompt\", \"messages\" or\n"
    "      \"prompt_ids\" and optional \"sampling_params\" (vLLM names). Greedy unless --temperature > 0.\n"
    "  deepinfer logits   [--model DIR] --ids 5,17,42 [--chunk N] [--numerics auto|exact|release]\n"
    "                     [--kv-cache-dtype auto|float32|bfloat16|fp8] --out FILE\n"
    "      writes the logits of every position as little-endian float32 [T, V] and prints \"T V\"\n"
    "      --chunk N feeds the prompt N tokens at a time through the decode state (1: token by token)\n"
    "  deepinfer tokenize   (--tokenizer FILE | --model DIR) (--text TEXT | --jsonl IN) [--add-special-tokens]\n"
    "      prints one JSON line {\"ids\": [...]} per input (JSONL lines carry \"text\"), in order\n"
    "  deepinfer detokenize (--tokenizer FILE | --model DIR) (--ids 1,2,3 | --jsonl IN) [--skip-special-tokens]\n"
    "      prints one JSON line {\"text\": \"...\"} per input (JSONL lines carry \"ids\")\n"
    "  deepinfer perplexity [--model DIR] --text-file FILE [--window 512]\n"
    "      mean negative log-likelihood per token and perplexity of the text (windows scored independently)\n"
    "      also takes --numerics and --kv-cache-dtype\n"
    "  deepinfer cache-info (--model DIR | --config FILE) [--block-size N]\n"
    "      state-cache bytes per request slot and per page under each KV cache dtype (one JSON line each)\n"
    "Without --model the default model is used: models/v4-code-19m of the source tree, a small DeepSeek-V4\n"
    "trained on Python code (or, if that folder is missing, an embedded model with random weights).\n";

deepinfer::Result<std::unique_ptr<deepinfer::Model>> open_model(const Args& a) {
  deepinfer::LoadOptions lo;
  if (a.opts.count("--numerics")) {
    DI_ASSIGN_OR_RETURN(lo.numerics, deepinfer::parse_numerics(a.opts.at("--numerics")));
  }
  if (a.opts.count("--kv-cache-dtype")) lo.kv_cache_dtype = a.opts.at("--kv-cache-dtype");
  auto it = a.opts.find("--model");
  if (it != a.opts.end()) return deepinfer::Model::load(it->second, lo);
  const std::string dir = default_model_dir();
  if (!dir.empty()) {
    std::fprintf(stderr, "deepinfer: no --model given; using the default model %s\n", dir.c_str());
    return deepinfer::Model::load(dir, lo);
  }
  auto m = deepinfer::Model::load_default();
  if (m.is_ok()) std::fprintf(stderr, "deepinfer: no --model given; using the %s\n", (*m)->info().description.c_str());
  return m;
}

int run_logits(const Args& a) {
  if (Status s = check_known(a, {"--model", "--ids", "--chunk", "--out", "--numerics", "--kv-cache-dtype"}); !s.is_ok())
    return fail(s);
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
  std::fprintf(stderr, "deepinfer: numerics %s, kv cache %s\n", (*model)->info().numerics.c_str(),
               (*model)->info().kv_cache_dtype.c_str());
  return 0;
}

// `deepinfer cache-info`: the state cache's bytes under each KV cache dtype, from a config alone.
int run_cache_info(const Args& a) {
  if (Status s = check_known(a, {"--model", "--config", "--block-size"}); !s.is_ok()) return fail(s);
  if (a.opts.count("--model") == a.opts.count("--config"))
    return fail(Status::invalid_argument("cache-info: give exactly one of --model DIR or --config FILE"));
  long long bs = 0;
  if (a.opts.count("--block-size") && !parse_int(a.opts.at("--block-size"), 1, 1 << 20, &bs))
    return fail(Status::invalid_argument("--block-size must be a positive integer"));
  const std::string src = a.opts.count("--model") ? a.opts.at("--model") : a.opts.at("--config");
  auto rows = deepinfer::state_cache_bytes(src, static_cast<int>(bs));
  if (!rows.is_ok()) return fail(rows.status());
  for (const deepinfer::StateCacheBytes& b : *rows) {
    std::printf("{\"kv_cache_dtype\": \"%s\", \"block_size\": %d, \"slot_bytes\": %lld, \"window_bytes\": %lld, "
                "\"page_bytes\": %lld, \"page_bytes_per_token\": %.2f, \"request_bytes_1k\": %lld, "
                "\"request_bytes_32k\": %lld, \"request_bytes_1m\": %lld}\n",
                b.kv_cache_dtype.c_str(), b.block_size, static_cast<long long>(b.slot_bytes),
                static_cast<long long>(b.window_bytes), static_cast<long long>(b.page_bytes),
                static_cast<double>(b.page_bytes) / b.block_size, static_cast<long long>(b.request_bytes(1024)),
                static_cast<long long>(b.request_bytes(32768)), static_cast<long long>(b.request_bytes(1 << 20)));
  }
  return 0;
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

}  // namespace deepinfer_cli

int main(int argc, char** argv) {
  using namespace deepinfer_cli;
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
  if (a.command == "perplexity") return run_perplexity(a, default_model_dir());
  if (a.command == "cache-info") return run_cache_info(a);
  if (a.command == "tokenize") return run_tokenize(a);
  if (a.command == "detokenize") return run_detokenize(a);
  if (a.command == "help" || a.command == "--help") {
    std::printf("%s", kUsage);
    return 0;
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n%s", a.command.c_str(), kUsage);
  return 2;
}
