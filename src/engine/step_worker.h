// The thread that runs model steps, in submission order. The engine thread submits step N+1 and
// then waits for step N, so scheduling and output processing overlap the model's work. Steps are
// shared, immutable: the engine keeps the plan of the step in flight without copying it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "base/check.h"
#include "core/request.h"
#include "deepinfer/status.h"
#include "engine/model_runner.h"

namespace deepinfer::engine {

class StepWorker {
 public:
  using Fn = std::function<Result<core::ModelOutput>(const StepInput&)>;

  StepWorker(Fn fn, std::function<void()> on_start) : fn_(std::move(fn)), thread_([this, on_start] {
    if (on_start) on_start();
    loop();
  }) {}

  ~StepWorker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void submit(std::shared_ptr<const StepInput> in) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(in));
    }
    cv_.notify_all();
  }

  // The result of the oldest submitted step not yet waited for.
  Result<core::ModelOutput> wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !results_.empty(); });
    Result<core::ModelOutput> r = std::move(results_.front());
    results_.pop_front();
    return r;
  }

 private:
  void loop() {
    for (;;) {
      std::shared_ptr<const StepInput> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      Result<core::ModelOutput> r = fn_(*job);
      {
        std::lock_guard<std::mutex> lock(mu_);
        results_.push_back(std::move(r));
      }
      cv_.notify_all();
    }
  }

  Fn fn_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const StepInput>> jobs_;
  std::deque<Result<core::ModelOutput>> results_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace deepinfer::engine
