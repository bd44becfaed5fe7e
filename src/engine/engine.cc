// The offline engine: implements include/deepinfer/engine.h by wiring the rooms together.
//
//   add_request: validate -> tokenize / chat-encode -> sched::Scheduler (host-only planning)
//   step:        Scheduler::schedule() -> StepInput -> StepWorker (ModelRunner: forward + sample)
//                -> Scheduler::update() -> stop checks, detokenize, timings -> RequestOutput
//
// With async_scheduling the engine thread schedules step N+1 and hands it to the worker before it
// waits for step N's tokens: scheduling and output processing overlap the model's work. Tokens are
// a pure function of each request's own inputs (batch-invariant forward, counter-based sampling),
// so overlap on or off, the outputs are identical.
#include <omp.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "backend/backend.h"
#ifdef DEEPINFER_WITH_CUDA
#include "backend/cuda/cuda_model.h"
#endif
#include "base/check.h"
#include "deepinfer/engine.h"
#include "deepinfer/tokenizer.h"
#include "engine/model_runner.h"
#include "engine/step_worker.h"
#include "model/deepseek_v4.h"
#include "model/loaded_model.h"
#include "model/numerics.h"
#include "model/state_cache.h"
#include "sched/scheduler.h"
#include "tokenizer/chat_encoding.h"

namespace deepinfer {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "";
}

Status SamplingParams::validate() const {
  auto bad = [](const std::string& field, const std::string& why) {
    return Status::invalid_argument("sampling_params." + field + " " + why);
  };
  if (!std::isfinite(temperature) || temperature < 0.0f)
    return bad("temperature", "must be >= 0, got " + std::to_string(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p", "must be in (0, 1], got " + std::to_string(top_p));
  if (top_k < -1) return bad("top_k", "must be -1, 0 (all tokens) or positive, got " + std::to_string(top_k));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p", "must be in [0, 1], got " + std::to_string(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return bad("repetition_penalty", "must be > 0, got " + std::to_string(repetition_penalty));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return bad("presence_penalty", "must be in [-2, 2], got " + std::to_string(presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return bad("frequency_penalty", "must be in [-2, 2], got " + std::to_string(frequency_penalty));
  if (max_tokens < 1) return bad("max_tokens", "must be at least 1, got " + std::to_string(max_tokens));
  if (min_tokens < 0 || min_tokens > max_tokens)
    return bad("min_tokens", "must be in [0, max_tokens], got " + std::to_string(min_tokens));
  if (logprobs && (*logprobs < 0 || *logprobs > 20))
    return bad("logprobs", "must be in [0, 20], got " + std::to_string(*logprobs));
  for (size_t i = 0; i < stop.size(); ++i)
    if (stop[i].empty()) return bad("stop[" + std::to_string(i) + "]", "is empty");
  return Status::ok();
}

namespace {

using Clock = std::chrono::steady_clock;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct EngineRequest {
  core::RequestId id = 0;
  SamplingParams params;
  std::shared_ptr<const engine::RunnerRequestInfo> info;
  std::unique_ptr<Detokenizer> detok;
  RequestOutput out;
  Clock::time_point arrival, first_token, last_token;
};

class LLMImpl final : public LLM {
 public:
  static Result<std::unique_ptr<LLM>> make(const EngineOptions& o) {
    auto e = std::unique_ptr<LLMImpl>(new LLMImpl());
    e->options_ = o;
    if (o.model.empty()) {
      e->model_ = model::load_embedded_model();
    } else {
      DI_ASSIGN_OR_RETURN(e->model_, model::load_model_dir(o.model));
      const auto tok_path = std::filesystem::path(o.model) / "tokenizer.json";
      if (std::filesystem::exists(tok_path)) {
        DI_ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::from_file(tok_path.string()));
      }
    }
    const model::ModelConfig& c = e->model_->config;
    if (o.numerics != "auto" && !model::numerics_from_name(o.numerics))
      return Status::invalid_argument("numerics must be auto, exact or release, got '" + o.numerics + "'");
    e->numerics_ = model::resolve_numerics(o.numerics, c);
    if (o.kv_cache_dtype != "auto" && !model::kv_cache_dtype_from_name(o.kv_cache_dtype))
      return Status::invalid_argument("kv_cache_dtype must be auto, float32, bfloat16 or fp8, got '" +
                                      o.kv_cache_dtype + "'");
    if (o.device != "cpu" && o.device != "cuda")
      return Status::invalid_argument("device must be cpu or cuda, got '" + o.device + "'");
    const bool cuda = o.device == "cuda";
#ifndef DEEPINFER_WITH_CUDA
    if (cuda)
      return Status::unsupported("device cuda: this build has no CUDA backend (configure with "
                                 "-DDEEPINFER_ACCELERATOR=nvidia)");
#endif
    model::KvCacheDtype kv_dtype =
        model::resolve_kv_cache_dtype(o.kv_cache_dtype, e->numerics_ == model::Numerics::kRelease);
    if (cuda) {  // the CUDA backend stores KV rows as bfloat16 (auto) or fp8
      if (o.kv_cache_dtype == "auto") kv_dtype = model::KvCacheDtype::kBF16;
      if (kv_dtype == model::KvCacheDtype::kF32)
        return Status::unsupported("device cuda stores the KV cache as bfloat16 or fp8; kv_cache_dtype '" +
                                   o.kv_cache_dtype + "' is CPU-only");
    }
    if (o.max_num_seqs < 1) return Status::invalid_argument("max_num_seqs must be at least 1");
    if (o.max_num_batched_tokens < 1) return Status::invalid_argument("max_num_batched_tokens must be at least 1");
    if (o.long_prefill_token_threshold < 0) return Status::invalid_argument("long_prefill_token_threshold must be >= 0");
    if (o.max_model_len < 0) return Status::invalid_argument("max_model_len must be >= 0");
    e->max_model_len_ = o.max_model_len > 0 ? o.max_model_len : c.max_position_embeddings;
    if (e->max_model_len_ <= 1) return Status::invalid_argument("the model's context length is not set (max_model_len)");
    const int block_size = o.block_size > 0 ? o.block_size : model::default_block_size(c);
    DI_ASSIGN_OR_RETURN(model::StateCacheShape shape, model::make_state_cache_shape(c, block_size, kv_dtype));

    // Memory: one slot per running request, the rest of the budget in pages.
    kv::CacheLayout layout;
    layout.block_size = block_size;
    layout.num_slots = o.max_num_seqs;
    layout.uses_pages = shape.page_bytes > 0;
    const int64_t slots_bytes = static_cast<int64_t>(shape.slot_bytes) * o.max_num_seqs;
    if (layout.uses_pages) {
      const int64_t page = static_cast<int64_t>(shape.page_bytes);
      int64_t budget = o.cache_bytes;
      if (budget == 0) {  // auto: 1 GiB of pages, at least enough for one request of max_model_len
        const int64_t one_request = (e->max_model_len_ + block_size - 1) / block_size * page;
        budget = slots_bytes + std::max<int64_t>(int64_t{1} << 30, one_request);
      }
      if (budget <= slots_bytes)
        return Status::invalid_argument("cache budget of " + std::to_string(budget) + " bytes does not cover the " +
                                        std::to_string(o.max_num_seqs) + " state slots (" +
                                        std::to_string(shape.slot_bytes) + " bytes each) plus any page (" +
                                        std::to_string(page) + " bytes)");
      const int64_t blocks = (budget - slots_bytes) / page;
      if (blocks < 1)
        return Status::invalid_argument("cache budget of " + std::to_string(budget) + " bytes leaves no room for a page of " +
                                        std::to_string(page) + " bytes after the state slots");
      layout.num_blocks = static_cast<int>(std::min<int64_t>(blocks, 1 << 30));
    }
    e->layout_ = layout;
    e->shape_ = shape;
    e->device_ = o.device;
    engine::ForwardFn forward;
    engine::AsyncGreedyFns async_greedy;
#ifdef DEEPINFER_WITH_CUDA
    if (cuda) {
      backend::cuda::CudaModelOptions co;
      co.num_slots = layout.num_slots;
      co.num_blocks = layout.num_blocks;
      co.block_size = block_size;
      co.max_step_tokens = o.max_num_batched_tokens;
      co.max_logit_rows = o.max_num_seqs;
      co.max_model_len = static_cast<int>(e->max_model_len_);
      co.kv_cache_dtype = kv_dtype;
      DI_ASSIGN_OR_RETURN(e->cuda_, backend::cuda::CudaModel::create(c, e->model_->weights, e->numerics_, co));
      backend::cuda::CudaModel* m = e->cuda_.get();
      forward = [m, greedy = std::vector<backend::cuda::GreedyToken>()](
                    std::span<const model::SeqChunk> b, std::vector<float>* l,
                    std::vector<engine::GreedyRow>* g) mutable -> Status {
        DI_RETURN_IF_ERROR(m->forward(b, l, g ? &greedy : nullptr));
        if (g) {
          g->resize(greedy.size());
          for (size_t i = 0; i < greedy.size(); ++i) (*g)[i] = engine::GreedyRow{greedy[i].token, greedy[i].logprob};
        }
        return Status::ok();
      };
      // Greedy steps stay on the device between steps: the engine's step N+1 is enqueued before
      // step N's tokens come back (ModelRunner, StepWorker).
      async_greedy.submit = [m, deferred = std::vector<backend::cuda::DeferredToken>()](
                                std::span<const model::SeqChunk> b,
                                std::span<const engine::DeferredToken> d) mutable -> Status {
        deferred.resize(d.size());
        for (size_t i = 0; i < d.size(); ++i) deferred[i] = backend::cuda::DeferredToken{d[i].index, d[i].row};
        return m->submit_greedy(b, deferred);
      };
      async_greedy.collect = [m, greedy = std::vector<backend::cuda::GreedyToken>()](
                                 std::vector<engine::GreedyRow>* g) mutable -> Status {
        DI_RETURN_IF_ERROR(m->collect_greedy(&greedy));
        g->resize(greedy.size());
        for (size_t i = 0; i < greedy.size(); ++i) (*g)[i] = engine::GreedyRow{greedy[i].token, greedy[i].logprob};
        return Status::ok();
      };
    }
#endif
    if (!cuda) {
      e->storage_ = std::make_unique<model::StateStorage>(shape, layout.num_slots, layout.num_blocks);
      e->backend_ = backend::make_cpu_backend();
      e->net_ = std::make_unique<model::DeepSeekV4>(c, e->model_->weights, *e->backend_, e->numerics_);
      model::DeepSeekV4* net = e->net_.get();
      model::StateStorage* storage = e->storage_.get();
      forward = [net, storage](std::span<const model::SeqChunk> b, std::vector<float>* l, std::vector<engine::GreedyRow>*) {
        return net->forward(b, *storage, l);
      };
    }
    e->runner_ = std::make_unique<engine::ModelRunner>(std::move(forward), c.vocab_size, /*device_greedy=*/cuda,
                                                       std::move(async_greedy));
    sched::SchedulerOptions so;
    so.max_num_seqs = o.max_num_seqs;
    so.max_num_batched_tokens = o.max_num_batched_tokens;
    so.long_prefill_token_threshold = o.long_prefill_token_threshold;
    e->scheduler_ = std::make_unique<sched::Scheduler>(so, layout);
    e->eos_ = c.eos_token_id;
    if (e->eos_ < 0 && e->tokenizer_ && e->tokenizer_->eos_token_id()) e->eos_ = *e->tokenizer_->eos_token_id();
    const int threads = o.num_threads;
    e->worker_ = std::make_unique<engine::StepWorker>(
        *e->runner_,
        [threads] {
          if (threads > 0) omp_set_num_threads(threads);
        });
    return std::unique_ptr<LLM>(std::move(e));
  }

  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const SamplingParams& params) override {
    return generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
  }

  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                      const std::vector<SamplingParams>& params) override {
    std::vector<RequestOutput> results(prompts.size());
    if (params.size() != prompts.size() && params.size() != 1) {
      for (RequestOutput& r : results) {
        r.finished = true;
        r.finish_reason = FinishReason::kError;
        r.error = "generate: " + std::to_string(params.size()) + " sampling parameter sets for " +
                  std::to_string(prompts.size()) + " prompts (give one, or one per prompt)";
      }
      return results;
    }
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const SamplingParams& sp = params.size() == prompts.size() ? params[i] : params[0];
      Result<std::string> id = add_request(prompts[i], sp);
      if (!id.is_ok()) {
        results[i].finished = true;
        results[i].finish_reason = FinishReason::kError;
        results[i].error = id.status().message();
        continue;
      }
      index[*id] = i;
      results[i].request_id = *id;
    }
    while (has_unfinished_requests()) {
      Result<std::vector<RequestOutput>> outs = step_impl(/*report_unfinished=*/false);
      if (!outs.is_ok()) {
        for (auto& [id, i] : index)
          if (!results[i].finished) {
            results[i].finished = true;
            results[i].finish_reason = FinishReason::kError;
            results[i].error = outs.status().message();
          }
        break;
      }
      for (RequestOutput& o : *outs) {
        auto it = index.find(o.request_id);
        if (it != index.end() && o.finished) results[it->second] = std::move(o);
      }
    }
    return results;
  }

  Result<std::string> add_request(const Prompt& prompt, const SamplingParams& params) override {
    const core::RequestId id = next_id_++;
    const std::string name = "request " + std::to_string(id);
    auto fail = [&](const Status& s) { return s.with_context(name); };
    Status valid = params.validate();
    if (!valid.is_ok()) return fail(valid);
    std::vector<int32_t> ids;
    switch (prompt.kind) {
      case Prompt::Kind::kTokenIds:
        ids = prompt.token_ids;
        break;
      case Prompt::Kind::kText: {
        if (!tokenizer_) return fail(Status::invalid_argument("a text prompt needs a tokenizer; the model has none (give prompt_ids)"));
        Result<std::vector<int32_t>> r = tokenizer_->encode(prompt.text, /*add_special_tokens=*/true);
        if (!r.is_ok()) return fail(r.status().with_context("prompt"));
        ids = std::move(r).value();
        break;
      }
      case Prompt::Kind::kMessages: {
        if (!tokenizer_) return fail(Status::invalid_argument("chat messages need a tokenizer; the model has none"));
        const auto json = nlohmann::ordered_json::parse(prompt.text, nullptr, /*allow_exceptions=*/false);
        if (json.is_discarded()) return fail(Status::invalid_argument("messages are not valid JSON"));
        Result<std::string> text = tokenizer::encode_chat(json, tokenizer::ChatOptions{});
        if (!text.is_ok()) return fail(text.status());
        Result<std::vector<int32_t>> r = tokenizer_->encode(*text, /*add_special_tokens=*/false);
        if (!r.is_ok()) return fail(r.status().with_context("rendered chat prompt"));
        ids = std::move(r).value();
        break;
      }
    }
    const int V = model_->config.vocab_size;
    if (ids.empty()) return fail(Status::invalid_argument("prompt is empty"));
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= V)
        return fail(Status::invalid_argument("prompt token " + std::to_string(i) + " is " + std::to_string(ids[i]) +
                                             ", outside the vocabulary [0, " + std::to_string(V) + ")"));
    for (size_t i = 0; i < params.stop_token_ids.size(); ++i)
      if (params.stop_token_ids[i] < 0 || params.stop_token_ids[i] >= V)
        return fail(Status::invalid_argument("sampling_params.stop_token_ids[" + std::to_string(i) + "] = " +
                                             std::to_string(params.stop_token_ids[i]) + " is outside the vocabulary"));
    if (!params.stop.empty() && !tokenizer_)
      return fail(Status::invalid_argument("stop strings need a tokenizer; the model has none (use stop_token_ids)"));
    if (static_cast<int64_t>(ids.size()) >= max_model_len_)
      return fail(Status::invalid_argument("prompt has " + std::to_string(ids.size()) +
                                           " tokens; the context is " + std::to_string(max_model_len_) +
                                           " tokens and at least one must be left to generate"));

    auto info = std::make_shared<engine::RunnerRequestInfo>();
    const uint64_t seed = params.seed ? *params.seed : splitmix64(options_.seed ^ splitmix64(id));
    info->sampling.temperature = params.temperature;
    info->sampling.top_k = params.top_k > 0 ? params.top_k : 0;
    info->sampling.top_p = params.top_p;
    info->sampling.min_p = params.min_p;
    info->sampling.repetition_penalty = params.repetition_penalty;
    info->sampling.presence_penalty = params.presence_penalty;
    info->sampling.frequency_penalty = params.frequency_penalty;
    info->sampling.seed = seed;
    info->sampling.num_logprobs = params.logprobs ? *params.logprobs : 0;
    info->reports_logprobs = params.logprobs.has_value();
    info->num_prompt_tokens = static_cast<int>(ids.size());
    info->min_tokens = params.min_tokens;
    info->min_tokens_banned = params.stop_token_ids;
    if (!params.ignore_eos && eos_ >= 0) info->min_tokens_banned.push_back(eos_);

    core::Request req;
    req.id = id;
    req.arrival = id;
    req.tokens = ids;
    req.num_prompt_tokens = static_cast<int>(ids.size());
    req.max_total_tokens = std::min<int64_t>(static_cast<int64_t>(ids.size()) + params.max_tokens, max_model_len_);
    Status added = scheduler_->add_request(std::move(req));
    if (!added.is_ok()) return fail(added);

    auto er = std::make_unique<EngineRequest>();
    er->id = id;
    er->params = params;
    er->info = info;
    if (tokenizer_) er->detok = std::make_unique<Detokenizer>(*tokenizer_, params.stop, params.skip_special_tokens);
    er->arrival = Clock::now();
    er->out.request_id = std::to_string(id);
    er->out.prompt_token_ids = std::move(ids);
    er->out.seed = seed;
    er->out.numerics = model::numerics_name(numerics_);
    er->out.kv_cache_dtype = model::kv_cache_dtype_name(shape_.kv_row.dtype);
    requests_[id] = std::move(er);
    return std::to_string(id);
  }

  Result<std::vector<RequestOutput>> step() override { return step_impl(/*report_unfinished=*/true); }

  Status abort(const std::string& request_id) override {
    core::RequestId id = 0;
    const char* end = request_id.data() + request_id.size();
    const auto [ptr, ec] = std::from_chars(request_id.data(), end, id);
    auto it = ec == std::errc() && ptr == end ? requests_.find(id) : requests_.end();
    if (it == requests_.end()) return Status::not_found("no unfinished request with id '" + request_id + "'");
    finish(*it->second, FinishReason::kAbort, "");
    changed_.insert(it->first);
    return Status::ok();
  }

  bool has_unfinished_requests() const override {
    return scheduler_->has_unfinished() || in_flight_ != nullptr || !changed_.empty();
  }
  const Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  int vocab_size() const override { return model_->config.vocab_size; }
  int max_model_len() const override { return static_cast<int>(max_model_len_); }
  EngineStats stats() const override {
    EngineStats s = stats_;
    s.preemptions = scheduler_->num_preemptions();
    s.num_blocks = layout_.num_blocks;
    s.block_size = layout_.block_size;
    s.slot_bytes = static_cast<int64_t>(shape_.slot_bytes);
    s.page_bytes = static_cast<int64_t>(shape_.page_bytes);
    s.kv_cache_dtype = model::kv_cache_dtype_name(shape_.kv_row.dtype);
    s.device = device_;
#ifdef DEEPINFER_WITH_CUDA
    if (cuda_) s.cuda_graph_replays = cuda_->graph_replays();
#endif
    s.overlapped_steps = runner_->overlapped_launches();
    return s;
  }
  std::string description() const override { return model_->description; }
  std::string numerics() const override { return model::numerics_name(numerics_); }

  ~LLMImpl() override {
    if (in_flight_) (void)worker_->wait();
  }

 private:
  LLMImpl() = default;

  // Plans a step and hands it to the worker; null when nothing can run (the plan's freed ids
  // then wait for the next step that runs).
  std::shared_ptr<const engine::StepInput> plan() {
    core::SchedulerOutput so = scheduler_->schedule();
    pending_freed_.insert(pending_freed_.end(), so.freed.begin(), so.freed.end());
    if (so.requests.empty()) return nullptr;
    auto in = std::make_shared<engine::StepInput>();
    so.freed = std::move(pending_freed_);
    pending_freed_.clear();
    for (const core::ScheduledRequest& r : so.requests)
      if (r.is_new) in->new_infos[r.id] = requests_.at(r.id)->info;
    in->sched = std::move(so);
    worker_->submit(in);
    return in;
  }

  Result<std::vector<RequestOutput>> step_impl(bool report_unfinished) {
    const bool had_in_flight = in_flight_ != nullptr;
    std::shared_ptr<const engine::StepInput> next = plan();
    const bool planned = next != nullptr;
    if (options_.async_scheduling) {
      // Step N+1 is already with the worker; now take step N's tokens.
      if (in_flight_) process(in_flight_->sched, worker_->wait());
      in_flight_ = std::move(next);
    } else if (next) {
      process(next->sched, worker_->wait());
    }
    // Nothing ran, nothing was in flight and nothing changed, yet requests remain: a bug.
    const bool stuck = !had_in_flight && !planned && scheduler_->has_unfinished() && changed_.empty();
    std::vector<RequestOutput> outs;
    for (core::RequestId id : changed_) {
      auto it = requests_.find(id);
      if (it == requests_.end()) continue;
      if (it->second->out.finished) {
        outs.push_back(std::move(it->second->out));
        requests_.erase(it);
      } else if (report_unfinished) {
        outs.push_back(it->second->out);
      }
    }
    changed_.clear();
    if (stuck) return Status::internal("the scheduler made no progress");
    return outs;
  }

  void process(const core::SchedulerOutput& so, Result<core::ModelOutput> result) {
    ++stats_.steps;
    if (!result.is_ok()) {
      // A step failed: every request in it ends with the error; the engine keeps serving others.
      for (const core::ScheduledRequest& r : so.requests) {
        auto it = requests_.find(r.id);
        if (it == requests_.end() || it->second->out.finished) continue;
        it->second->out.error = result.status().message();
        finish(*it->second, FinishReason::kError, "");
        changed_.insert(r.id);
      }
      return;
    }
    for (const core::ScheduledRequest& r : so.requests) {
      auto it = requests_.find(r.id);
      if (it == requests_.end()) continue;
      const int64_t prompt_end = it->second->info->num_prompt_tokens;
      stats_.prompt_tokens += static_cast<uint64_t>(std::max<int64_t>(0, std::min<int64_t>(r.start + r.num_tokens, prompt_end) - r.start));
    }
    const core::ModelOutput& out = *result;
    scheduler_->update(so, out);
    for (const core::SampledToken& t : out.sampled) {
      auto it = requests_.find(t.id);
      if (it == requests_.end() || it->second->out.finished) continue;  // finished while this step ran
      on_token(*it->second, t);
      changed_.insert(t.id);
    }
  }

  void on_token(EngineRequest& er, const core::SampledToken& t) {
    ++stats_.generated_tokens;
    RequestOutput& o = er.out;
    const auto now = Clock::now();
    if (o.token_ids.empty()) er.first_token = now;
    er.last_token = now;
    o.token_ids.push_back(t.token);
    if (er.params.logprobs) {
      TokenLogprob lp;
      lp.token = t.token;
      lp.logprob = t.logprob;
      for (const core::TopLogprob& x : t.top) lp.top.emplace_back(x.token, x.logprob);
      o.logprobs.push_back(std::move(lp));
    }
    if (er.detok) {
      Result<std::string> piece = er.detok->add(t.token);
      if (piece.is_ok()) o.text += *piece;
    }
    const SamplingParams& p = er.params;
    const bool stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t.token) != p.stop_token_ids.end();
    if (stop_id) return finish(er, FinishReason::kStop, std::to_string(t.token));
    if (!p.ignore_eos && t.token == eos_) return finish(er, FinishReason::kStop, "");
    if (er.detok && er.detok->stopped()) {
      if (p.include_stop_str_in_output) o.text += er.detok->matched_stop();
      return finish(er, FinishReason::kStop, er.detok->matched_stop());
    }
    const int64_t total = static_cast<int64_t>(o.prompt_token_ids.size() + o.token_ids.size());
    if (static_cast<int>(o.token_ids.size()) >= p.max_tokens || total >= max_model_len_)
      return finish(er, FinishReason::kLength, "");
  }

  // Ends a request: the scheduler frees its cache (the runner drops its state at the next step).
  void finish(EngineRequest& er, FinishReason reason, const std::string& stop_reason) {
    RequestOutput& o = er.out;
    if (const core::Request* r = scheduler_->find(er.id)) o.num_preemptions = r->num_preemptions;
    scheduler_->finish_request(er.id);
    if (er.detok && !er.detok->stopped()) o.text += er.detok->finish();
    o.finished = true;
    o.finish_reason = reason;
    o.stop_reason = stop_reason;
    const auto now = Clock::now();
    auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    if (!o.token_ids.empty()) {
      o.time_to_first_token = secs(er.first_token - er.arrival);
      if (o.token_ids.size() > 1)
        o.time_per_output_token = secs(er.last_token - er.first_token) / static_cast<double>(o.token_ids.size() - 1);
    }
    o.total_time = secs(now - er.arrival);
  }

  EngineOptions options_;
  std::unique_ptr<model::LoadedModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  int64_t max_model_len_ = 0;
  model::Numerics numerics_ = model::Numerics::kExact;
  int eos_ = -1;
  kv::CacheLayout layout_;
  model::StateCacheShape shape_;
  std::unique_ptr<model::StateStorage> storage_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<model::DeepSeekV4> net_;
#ifdef DEEPINFER_WITH_CUDA
  std::unique_ptr<backend::cuda::CudaModel> cuda_;
#endif
  std::string device_ = "cpu";
  std::unique_ptr<engine::ModelRunner> runner_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::unique_ptr<engine::StepWorker> worker_;  // declared last: destroyed first, before what it uses
  std::map<core::RequestId, std::unique_ptr<EngineRequest>> requests_;
  std::set<core::RequestId> changed_;
  std::vector<core::RequestId> pending_freed_;
  std::shared_ptr<const engine::StepInput> in_flight_;  // async: the step the worker is running
  core::RequestId next_id_ = 0;
  EngineStats stats_;
};

}  // namespace

Result<std::unique_ptr<LLM>> LLM::create(const EngineOptions& options) { return LLMImpl::make(options); }

}  // namespace deepinfer
