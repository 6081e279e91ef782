// Waiting on shared memory without hanging silently: spin briefly, then yield,
// then sleep with back-off (so 8 PEs on 2 cores progress), and every few
// milliseconds ask whether the wait can still finish.
//
// NOTE [wait phases] (measured with `unishmem bench`, 2-core VM): the spin polls plain loads,
// without pause: under oversubscription (or with pause-loop exits in a VM) pause-spinning held the
// CPU the awaited PE needed, and 4-PE barriers took 5x longer. A PE that has a core to itself
// spins for up to spin_s first (a peer's answer then costs one cache-line transfer, ~100 ns); one
// that shares its core yields at once. Whether it shares is learnt from the yields themselves: a
// yield that returns within kAloneYield (0.4 us here) found nobody else to run, one that took
// longer gave the core away (2.3 us here); so other programs' load on a core turns the spin off,
// and it comes back once yields return at once again. Yielding goes on for kYieldPhase: a sleep
// costs a timer slack (~60 us here), so sleeping early made every oversubscribed barrier that slow.
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
  double spin_s = 0.0;         // the longest spin before the first yield (HostBackend sets it)
};

// The spin the next wait starts with; adapted by each wait that got as far as yielding.
struct SpinState {
  double spin_s = 0.0;
};

constexpr int kMinSpinPolls = 128;                             // always, before the clock is read
constexpr auto kYieldPhase = std::chrono::milliseconds(10);  // then sleep with back-off
constexpr auto kCheckEvery = std::chrono::milliseconds(10);  // dead peers, Ctrl-C, stalls
constexpr auto kAloneYield = std::chrono::nanoseconds(1500);  // a quicker yield ran nobody else

// Called periodically during a wait; throws to abort it (dead peer, Ctrl-C).
using WaitCheck = std::function<void()>;

template <class Done, class Describe>
void wait_for(Done&& done, Describe&& describe, const WaitPolicy& policy, SpinState& spin, const WaitCheck& check);

int available_cpus();  // CPUs this process may run on
void report_stall(const std::string& what, double seconds);
[[noreturn]] void raise_timeout(const std::string& what, double seconds);

template <class Done, class Describe>
void wait_for(Done&& done, Describe&& describe, const WaitPolicy& policy, SpinState& spin, const WaitCheck& check) {
  for (int i = 0; i < kMinSpinPolls; ++i)
    if (done()) return;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  if (spin.spin_s > 0) {
    const auto until = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(spin.spin_s));
    for (unsigned i = 1;; ++i) {
      if (done()) return;
      if (i % 32 == 0 && clock::now() >= until) break;
    }
  }
  auto next_check = start + kCheckEvery;  // a check reads /proc: not on every short wait
  bool warned = false, shared = false;
  long sleep_ns = 0;
  for (;;) {
    if (done()) {
      spin.spin_s = shared ? 0.0 : policy.spin_s;
      return;
    }
    auto now = clock::now();
    if (now >= next_check) {
      next_check = now + kCheckEvery;
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
    if (now - start < kYieldPhase) {
      std::this_thread::yield();
      shared = shared || clock::now() - now > kAloneYield;
    } else {
      sleep_ns = sleep_ns ? std::min(sleep_ns * 2, 200'000L) : 1'000L;
      std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
    }
  }
}

}  // namespace unishmem::host
