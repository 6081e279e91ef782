// Waiting on shared memory without hanging silently: spin briefly, then yield,
// then sleep with back-off (so 8 PEs on 2 cores progress), and every few
// milliseconds ask whether the wait can still finish.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace unishmem::host {

struct WaitPolicy {
  double stall_warn_s = 30.0;  // print once what is being waited for
  double timeout_s = 300.0;    // then raise; <= 0 waits forever
  double deadlock_s = 5.0;     // every PE waiting this long with no progress is a deadlock; <= 0: never
};

// Called periodically during a wait; throws to abort it (dead peer, Ctrl-C).
using WaitCheck = std::function<void()>;

template <class Done, class Describe>
void wait_for(Done&& done, Describe&& describe, const WaitPolicy& policy, const WaitCheck& check);

void cpu_relax();
void report_stall(const std::string& what, double seconds);
[[noreturn]] void raise_timeout(const std::string& what, double seconds);

template <class Done, class Describe>
void wait_for(Done&& done, Describe&& describe, const WaitPolicy& policy, const WaitCheck& check) {
  for (int i = 0; i < 256; ++i) {
    if (done()) return;
    cpu_relax();
  }
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto next_check = start;
  bool warned = false;
  long sleep_ns = 0;
  for (unsigned iter = 0;; ++iter) {
    if (done()) return;
    auto now = clock::now();
    if (now >= next_check) {
      next_check = now + std::chrono::milliseconds(10);
      try {
        check();
      } catch (...) {
        if (done()) return;  // the peer did its part just before it left
        throw;
      }
      double waited = std::chrono::duration<double>(now - start).count();
      if (!warned && policy.stall_warn_s > 0 && waited > policy.stall_warn_s) {
        report_stall(describe(), waited);
        warned = true;
      }
      if (policy.timeout_s > 0 && waited > policy.timeout_s) raise_timeout(describe(), waited);
    }
    if (iter < 64) {
      std::this_thread::yield();
    } else {
      sleep_ns = sleep_ns ? std::min(sleep_ns * 2, 200'000L) : 1'000L;
      std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
    }
  }
}

}  // namespace unishmem::host
