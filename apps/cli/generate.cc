// `deepinfer generate`: batch generation through the public engine API.
//
// Inputs: --prompt TEXT, --prompt-ids 1,2,3, or --prompts IN.jsonl whose lines carry "prompt"
// (text), "messages" (chat) or "prompt_ids" (token ids), plus optional "sampling_params" (vLLM
// names) that override the command-line sampling flags for that line. Output: one JSON line per
// input, in input order, to --out or stdout. A bad line gets {"index", "error"} and the exit status
// 1; the other lines run normally.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>

#include <nlohmann/json.hpp>

#include "apps/cli/args.h"
#include "deepinfer/engine.h"

namespace deepinfer_cli {

namespace {

using deepinfer::Prompt;
using deepinfer::RequestOutput;
using deepinfer::SamplingParams;
using Json = nlohmann::json;

Status bad(const std::string& where, const std::string& what) { return Status::invalid_argument(where + ": " + what); }

Status get_float(const Json& v, const std::string& where, float* out) {
  if (!v.is_number()) return bad(where, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) return bad(where, "must be finite");
  *out = static_cast<float>(d);
  return Status::ok();
}

Status get_int(const Json& v, const std::string& where, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_number_integer()) return bad(where, "must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return bad(where, "is out of range");
  *out = v.get<int64_t>();
  if (*out < lo || *out > hi) return bad(where, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return Status::ok();
}

Status get_ids(const Json& v, const std::string& where, std::vector<int32_t>* out) {
  if (!v.is_array()) return bad(where, "must be an array of token ids");
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t x = 0;
    DI_RETURN_IF_ERROR(get_int(v[i], where + "[" + std::to_string(i) + "]", INT32_MIN, INT32_MAX, &x));
    out->push_back(static_cast<int32_t>(x));
  }
  return Status::ok();
}

// vLLM SamplingParams fields deepinfer does not implement. Given at their default value they are
// accepted (and change nothing); any other value is an error saying so.
bool is_vllm_field(const std::string& k) {
  static const char* kFields[] = {"n", "best_of", "prompt_logprobs", "detokenize", "spaces_between_special_tokens",
                                  "logit_bias", "bad_words", "allowed_token_ids", "truncate_prompt_tokens",
                                  "output_kind", "logits_processors", "guided_decoding", "structured_outputs",
                                  "extra_args", "flat_logprobs"};
  for (const char* f : kFields)
    if (k == f) return true;
  return false;
}

bool is_neutral_vllm_field(const std::string& k, const Json& v) {
  if (!is_vllm_field(k)) return false;
  if (v.is_null()) return true;
  if (k == "n" || k == "best_of") return v.is_number_integer() && v.get<int64_t>() == 1;
  if (k == "detokenize" || k == "spaces_between_special_tokens") return v.is_boolean() && v.get<bool>();
  if (k == "flat_logprobs") return v.is_boolean() && !v.get<bool>();
  if (k == "logit_bias" || k == "bad_words" || k == "extra_args") return v.empty();
  return false;
}

// Applies a "sampling_params" object over `p`. Unknown fields are errors (a typo must not silently
// change nothing).
Status apply_sampling_json(const Json& j, const std::string& where, SamplingParams* p) {
  if (!j.is_object()) return bad(where, "must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    const std::string w = where + "." + k;
    int64_t n = 0;
    if (k == "temperature") DI_RETURN_IF_ERROR(get_float(v, w, &p->temperature));
    else if (k == "top_p") DI_RETURN_IF_ERROR(get_float(v, w, &p->top_p));
    else if (k == "min_p") DI_RETURN_IF_ERROR(get_float(v, w, &p->min_p));
    else if (k == "repetition_penalty") DI_RETURN_IF_ERROR(get_float(v, w, &p->repetition_penalty));
    else if (k == "presence_penalty") DI_RETURN_IF_ERROR(get_float(v, w, &p->presence_penalty));
    else if (k == "frequency_penalty") DI_RETURN_IF_ERROR(get_float(v, w, &p->frequency_penalty));
    else if (k == "top_k") {
      DI_RETURN_IF_ERROR(get_int(v, w, INT32_MIN, INT32_MAX, &n));
      p->top_k = static_cast<int>(n);
    } else if (k == "seed") {
      if (v.is_null()) {
        p->seed.reset();
      } else if (v.is_number_unsigned()) {
        p->seed = v.get<uint64_t>();
      } else {
        DI_RETURN_IF_ERROR(get_int(v, w, 0, std::numeric_limits<int64_t>::max(), &n));
        p->seed = static_cast<uint64_t>(n);
      }
    } else if (k == "max_tokens") {
      if (v.is_null()) continue;
      DI_RETURN_IF_ERROR(get_int(v, w, INT32_MIN, INT32_MAX, &n));
      p->max_tokens = static_cast<int>(n);
    } else if (k == "min_tokens") {
      DI_RETURN_IF_ERROR(get_int(v, w, INT32_MIN, INT32_MAX, &n));
      p->min_tokens = static_cast<int>(n);
    } else if (k == "logprobs") {
      if (v.is_null()) {
        p->logprobs.reset();
      } else {
        DI_RETURN_IF_ERROR(get_int(v, w, INT32_MIN, INT32_MAX, &n));
        p->logprobs = static_cast<int>(n);
      }
    } else if (k == "ignore_eos") {
      if (!v.is_boolean()) return bad(w, "must be true or false");
      p->ignore_eos = v.get<bool>();
    } else if (k == "skip_special_tokens") {
      if (!v.is_boolean()) return bad(w, "must be true or false");
      p->skip_special_tokens = v.get<bool>();
    } else if (k == "stop") {
      p->stop.clear();
      if (v.is_string()) {
        p->stop.push_back(v.get<std::string>());
      } else if (v.is_array()) {
        for (const Json& s : v) {
          if (!s.is_string()) return bad(w, "must be a string or an array of strings");
          p->stop.push_back(s.get<std::string>());
        }
      } else if (!v.is_null()) {
        return bad(w, "must be a string or an array of strings");
      }
    } else if (k == "stop_token_ids") {
      if (v.is_null()) p->stop_token_ids.clear();
      else DI_RETURN_IF_ERROR(get_ids(v, w, &p->stop_token_ids));
    } else if (k == "include_stop_str_in_output") {
      if (!v.is_boolean()) return bad(w, "must be true or false");
      p->include_stop_str_in_output = v.get<bool>();
    } else if (is_neutral_vllm_field(k, v)) {
      continue;  // a vLLM parameter at its default value: nothing to do
    } else if (is_vllm_field(k)) {
      return bad(w, "is a vLLM sampling parameter deepinfer does not support (only its default value is accepted)");
    } else {
      return bad(w, "is not a known sampling parameter");
    }
  }
  return Status::ok();
}

// Sampling flags of the command line, as a JSON object for apply_sampling_json.
Status sampling_from_flags(const Args& a, SamplingParams* p) {
  Json j = Json::object();
  const std::pair<const char*, const char*> floats[] = {
      {"--temperature", "temperature"}, {"--top-p", "top_p"}, {"--min-p", "min_p"},
      {"--repetition-penalty", "repetition_penalty"}, {"--presence-penalty", "presence_penalty"},
      {"--frequency-penalty", "frequency_penalty"}};
  for (const auto& [flag, key] : floats)
    if (a.opts.count(flag)) {
      const std::string& s = a.opts.at(flag);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0') return Status::invalid_argument(std::string(flag) + ": '" + s + "' is not a number");
      j[key] = d;
    }
  const std::pair<const char*, const char*> ints[] = {
      {"--top-k", "top_k"}, {"--seed", "seed"}, {"--max-tokens", "max_tokens"}, {"--min-tokens", "min_tokens"},
      {"--logprobs", "logprobs"}};
  for (const auto& [flag, key] : ints)
    if (a.opts.count(flag)) {
      long long v = 0;
      if (!parse_int(a.opts.at(flag), std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max(), &v))
        return Status::invalid_argument(std::string(flag) + ": '" + a.opts.at(flag) + "' is not an integer");
      j[key] = v;
    }
  if (a.opts.count("--stop-token-ids")) {
    std::vector<int32_t> ids;
    DI_RETURN_IF_ERROR(parse_ids(a.opts.at("--stop-token-ids"), "--stop-token-ids", &ids));
    j["stop_token_ids"] = ids;
  }
  if (!a.stops.empty()) j["stop"] = a.stops;
  if (has_flag(a, "--ignore-eos")) j["ignore_eos"] = true;
  if (has_flag(a, "--keep-special-tokens")) j["skip_special_tokens"] = false;
  return apply_sampling_json(j, "command line", p);
}

Json chat_user(const std::string& text) { return Json::array({{{"role", "user"}, {"content", text}}}); }

// One input line -> prompt + sampling parameters.
Status parse_line(const std::string& line, const std::string& where, bool chat, const SamplingParams& defaults,
                  Prompt* prompt, SamplingParams* params) {
  const Json j = Json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad(where, "not a JSON object");
  const int kinds = static_cast<int>(j.contains("prompt")) + static_cast<int>(j.contains("messages")) +
                    static_cast<int>(j.contains("prompt_ids")) + static_cast<int>(j.contains("prompt_token_ids"));
  if (kinds != 1) return bad(where, "give exactly one of \"prompt\", \"messages\" or \"prompt_ids\"");
  if (j.contains("prompt")) {
    if (!j["prompt"].is_string()) return bad(where, "\"prompt\" must be a string");
    const std::string text = j["prompt"].get<std::string>();
    *prompt = chat ? Prompt::from_messages_json(chat_user(text).dump()) : Prompt::from_text(text);
  } else if (j.contains("messages")) {
    if (!j["messages"].is_array()) return bad(where, "\"messages\" must be an array");
    *prompt = Prompt::from_messages_json(j["messages"].dump());
  } else {
    const char* key = j.contains("prompt_ids") ? "prompt_ids" : "prompt_token_ids";
    std::vector<int32_t> ids;
    DI_RETURN_IF_ERROR(get_ids(j[key], where + ": " + key, &ids));
    *prompt = Prompt::from_token_ids(std::move(ids));
  }
  *params = defaults;
  if (j.contains("sampling_params")) DI_RETURN_IF_ERROR(apply_sampling_json(j["sampling_params"], where + ": sampling_params", params));
  return Status::ok();
}

nlohmann::ordered_json output_json(size_t index, const RequestOutput& o, bool has_tokenizer) {
  using OJson = nlohmann::ordered_json;
  OJson j = OJson::object();
  j["index"] = index;
  if (o.finish_reason == deepinfer::FinishReason::kError && o.token_ids.empty()) {
    j["error"] = o.error;
    j["finish_reason"] = "error";
    return j;
  }
  j["request_id"] = o.request_id;
  if (has_tokenizer) j["text"] = o.text;
  j["token_ids"] = o.token_ids;
  j["finish_reason"] = deepinfer::finish_reason_name(o.finish_reason);
  if (!o.stop_reason.empty()) j["stop_reason"] = o.stop_reason;
  if (!o.error.empty()) j["error"] = o.error;
  j["num_prompt_tokens"] = o.prompt_token_ids.size();
  j["seed"] = o.seed;
  j["numerics"] = o.numerics;
  j["kv_cache_dtype"] = o.kv_cache_dtype;
  if (!o.logprobs.empty()) {
    OJson lps = OJson::array();
    for (const auto& lp : o.logprobs) {
      OJson top = OJson::array();
      for (const auto& [tok, v] : lp.top) top.push_back({{"token_id", tok}, {"logprob", v}});
      lps.push_back({{"token_id", lp.token}, {"logprob", lp.logprob}, {"top_logprobs", top}});
    }
    j["logprobs"] = lps;
  }
  j["num_preemptions"] = o.num_preemptions;
  j["timings"] = {{"time_to_first_token_s", o.time_to_first_token},
                  {"time_per_output_token_s", o.time_per_output_token},
                  {"total_s", o.total_time}};
  return j;
}

class Progress {
 public:
  Progress(bool on, size_t total) : on_(on), total_(total), start_(std::chrono::steady_clock::now()) {}
  void update(size_t done, uint64_t tokens, bool final = false) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const int width = 30;
    const int filled = total_ ? static_cast<int>(width * done / total_) : width;
    std::fprintf(stderr, "\r[%s%s] %zu/%zu requests, %llu tokens, %.1f tok/s, %.1fs", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total_, static_cast<unsigned long long>(tokens),
                 secs > 0 ? static_cast<double>(tokens) / secs : 0.0, secs);
    if (final) std::fprintf(stderr, "\n");
  }

 private:
  bool on_;
  size_t total_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace

int run_generate(const Args& a) {
  if (Status s = check_known(a, {"--model", "--prompt", "--prompt-ids", "--prompts", "--out", "--temperature", "--top-p",
                                 "--top-k", "--min-p", "--repetition-penalty", "--presence-penalty",
                                 "--frequency-penalty", "--seed", "--max-tokens", "--min-tokens", "--logprobs",
                                 "--stop-token-ids", "--max-num-seqs", "--max-num-batched-tokens", "--cache-mib",
                                 "--block-size", "--max-model-len", "--threads", "--chunk", "--format", "--numerics",
                                 "--kv-cache-dtype", "--device"});
      !s.is_ok())
    return fail(s);
  const int sources = static_cast<int>(a.opts.count("--prompt")) + static_cast<int>(a.opts.count("--prompt-ids")) +
                      static_cast<int>(a.opts.count("--prompts"));
  if (sources != 1) return fail(Status::invalid_argument("generate: give exactly one of --prompt, --prompt-ids or --prompts"));

  // The command line's defaults: greedy (temperature 0) unless a flag says otherwise.
  SamplingParams defaults;
  defaults.temperature = 0.0f;
  if (Status s = sampling_from_flags(a, &defaults); !s.is_ok()) return fail(s);
  const bool chat = has_flag(a, "--chat");
  // Output format: plain text for one --prompt (unless --format jsonl), JSON lines otherwise.
  std::string format = a.opts.count("--format") ? a.opts.at("--format") : (a.opts.count("--prompt") ? "text" : "jsonl");
  if (format != "text" && format != "jsonl") return fail(Status::invalid_argument("--format must be text or jsonl"));
  if (format == "text" && !a.opts.count("--prompt"))
    return fail(Status::invalid_argument("--format text needs a single --prompt"));
  const bool text_format = format == "text";

  deepinfer::EngineOptions eo;
  eo.model = a.opts.count("--model") ? a.opts.at("--model") : default_model_dir();
  const std::pair<const char*, int*> engine_ints[] = {{"--max-num-seqs", &eo.max_num_seqs},
                                                      {"--max-num-batched-tokens", &eo.max_num_batched_tokens},
                                                      {"--block-size", &eo.block_size},
                                                      {"--max-model-len", &eo.max_model_len},
                                                      {"--threads", &eo.num_threads},
                                                      {"--chunk", &eo.long_prefill_token_threshold}};
  for (const auto& [flag, dst] : engine_ints)
    if (a.opts.count(flag)) {
      long long v = 0;
      if (!parse_int(a.opts.at(flag), 1, 1 << 30, &v))
        return fail(Status::invalid_argument(std::string(flag) + " must be a positive integer"));
      *dst = static_cast<int>(v);
    }
  if (a.opts.count("--cache-mib")) {
    long long v = 0;
    if (!parse_int(a.opts.at("--cache-mib"), 1, 1ll << 30, &v))
      return fail(Status::invalid_argument("--cache-mib must be a positive integer"));
    eo.cache_bytes = v << 20;
  }
  eo.async_scheduling = !has_flag(a, "--no-async");
  if (a.opts.count("--numerics")) eo.numerics = a.opts.at("--numerics");
  if (a.opts.count("--kv-cache-dtype")) eo.kv_cache_dtype = a.opts.at("--kv-cache-dtype");
  if (a.opts.count("--device")) eo.device = a.opts.at("--device");

  // Inputs.
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  std::vector<std::string> line_errors;  // per input; empty when the line parsed
  if (a.opts.count("--prompt")) {
    const std::string& t = a.opts.at("--prompt");
    prompts.push_back(chat ? Prompt::from_messages_json(chat_user(t).dump()) : Prompt::from_text(t));
    params.push_back(defaults);
    line_errors.emplace_back();
  } else if (a.opts.count("--prompt-ids")) {
    std::vector<int32_t> ids;
    if (Status s = parse_ids(a.opts.at("--prompt-ids"), "--prompt-ids", &ids); !s.is_ok()) return fail(s);
    prompts.push_back(Prompt::from_token_ids(std::move(ids)));
    params.push_back(defaults);
    line_errors.emplace_back();
  } else {
    const std::string& path = a.opts.at("--prompts");
    std::ifstream in(path);
    if (!in) return fail(Status::not_found("cannot read " + path));
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Prompt p;
      SamplingParams sp;
      Status s = parse_line(line, path + ":" + std::to_string(line_no), chat, defaults, &p, &sp);
      prompts.push_back(std::move(p));
      params.push_back(sp);
      line_errors.push_back(s.is_ok() ? std::string() : s.message());
    }
  }

  auto llm = deepinfer::LLM::create(eo);
  if (!llm.is_ok()) return fail(llm.status());
  if (!a.opts.count("--model"))
    std::fprintf(stderr, "deepinfer: no --model given; using the %s\n",
                 eo.model.empty() ? (*llm)->description().c_str() : ("default model " + eo.model).c_str());
  const bool has_tokenizer = (*llm)->tokenizer() != nullptr;

  // Queue every valid input, then step until all are done (streaming API, for the progress bar).
  std::vector<RequestOutput> results(prompts.size());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (!line_errors[i].empty()) {
      results[i].finish_reason = deepinfer::FinishReason::kError;
      results[i].error = line_errors[i];
      continue;
    }
    auto id = (*llm)->add_request(prompts[i], params[i]);
    if (!id.is_ok()) {
      results[i].finish_reason = deepinfer::FinishReason::kError;
      results[i].error = id.status().message();
      continue;
    }
    index[*id] = i;
  }
  const bool show = has_flag(a, "--progress") || (!has_flag(a, "--no-progress") && isatty(2) && prompts.size() > 1);
  Progress progress(show, prompts.size());
  size_t done = prompts.size() - index.size();
  uint64_t tokens = 0;
  while ((*llm)->has_unfinished_requests()) {
    auto outs = (*llm)->step();
    if (!outs.is_ok()) return fail(outs.status());
    for (RequestOutput& o : *outs) {
      if (!o.finished) continue;
      auto it = index.find(o.request_id);
      if (it == index.end()) continue;
      tokens += o.token_ids.size();
      results[it->second] = std::move(o);
      ++done;
    }
    progress.update(done, tokens);
  }
  progress.update(done, tokens, true);

  std::ofstream file;
  if (a.opts.count("--out")) {
    file.open(a.opts.at("--out"));
    if (!file) return fail(Status::io_error("cannot open " + a.opts.at("--out") + " for writing"));
  }
  std::ostream& out = a.opts.count("--out") ? static_cast<std::ostream&>(file) : std::cout;
  if (text_format) {  // a person's view: the prompt, then what the model wrote
    const RequestOutput& r = results[0];
    if (r.finish_reason == deepinfer::FinishReason::kError) return fail(Status::invalid_argument(r.error));
    if (!has_tokenizer) {
      out << "(the model has no tokenizer; generated token ids:";
      for (int32_t t : r.token_ids) out << ' ' << t;
      out << ")\n";
    } else {
      out << (chat ? std::string() : a.opts.at("--prompt")) << r.text << "\n";
    }
    out.flush();
    return out ? 0 : fail(Status::io_error("writing the output failed"));
  }
  int errors = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].finish_reason == deepinfer::FinishReason::kError) {
      ++errors;
      std::fprintf(stderr, "deepinfer: input %zu: error: %s\n", i, results[i].error.c_str());
    }
    out << output_json(i, results[i], has_tokenizer).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
        << "\n";
  }
  out.flush();
  if (!out) return fail(Status::io_error("writing the output failed"));
  return errors ? 1 : 0;
}

}  // namespace deepinfer_cli
