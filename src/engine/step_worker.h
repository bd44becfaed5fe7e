// The thread that runs model steps, in submission order. The engine thread submits step N+1 and
// then waits for step N, so scheduling and output processing overlap the model's work. Steps are
// shared, immutable: the engine keeps the plan of the step in flight without copying it.
//
// With an asynchronous backend the overlap reaches the device: when step N went to the device
// asynchronously (ModelRunner::launch) and step N+1 can follow it there (ModelRunner::can_overlap),
// N+1 is launched before N's tokens are fetched, so the device runs N+1 while the host returns N's
// tokens and the engine plans N+2. The worker then keeps one step in flight between jobs; it
// finishes it when the next job cannot overlap it, when someone waits for its result and no job
// is queued, and at shutdown. Results are delivered in submission order either way.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "base/check.h"
#include "core/request.h"
#include "deepinfer/status.h"
#include "engine/model_runner.h"

namespace deepinfer::engine {

class StepWorker {
 public:
  // `runner` is used on the worker thread only, and must outlive the worker.
  StepWorker(ModelRunner& runner, std::function<void()> on_start)
      : runner_(runner), thread_([this, on_start] {
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
    ++waiting_;
    cv_.notify_all();  // the worker may be holding a step in flight, waiting for a next job
    cv_.wait(lock, [this] { return !results_.empty(); });
    --waiting_;
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
        // (runner_ is touched by this thread only; reading its count under the lock is fine.)
        cv_.wait(lock, [this] {
          return stop_ || !jobs_.empty() || (waiting_ > 0 && results_.empty() && runner_.num_launched() > 0);
        });
        if (!jobs_.empty()) {
          job = std::move(jobs_.front());
          jobs_.pop_front();
        } else if (runner_.num_launched() == 0) {
          return;  // stop_, nothing left
        }
      }
      if (!job) {  // someone waits for the step in flight (or shutdown): fetch it
        deliver(runner_.finish());
        continue;
      }
      if (runner_.num_launched() > 0 && !runner_.can_overlap(*job)) deliver(runner_.finish());
      runner_.launch(*job);
      // Launched behind the one in flight: that one's tokens now, while the device runs this one.
      if (runner_.num_launched() > 1) deliver(runner_.finish());
      if (runner_.oldest_is_done()) deliver(runner_.finish());
    }
  }

  void deliver(Result<core::ModelOutput> r) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      results_.push_back(std::move(r));
    }
    cv_.notify_all();
  }

  ModelRunner& runner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const StepInput>> jobs_;
  std::deque<Result<core::ModelOutput>> results_;
  int waiting_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: started after the members it uses
};

}  // namespace deepinfer::engine
