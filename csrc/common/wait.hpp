// Waiting on shared memory without hanging silently: poll, spin with pause for a learnt budget,
// then sleep on a futex that the writer rings; every few milliseconds ask whether the wait can
// still finish.
//
// NOTE [wait phases]:
// 1. kMinSpinPolls plain loads: a peer that is answering right now (~100 ns) is seen at once.
// 2. A spin with `pause` between polls, for the thread's budget (SpinState). The budget is
//    learnt from the waits that outlived it: one whose answer came within kMaxSpin would have
//    been caught by a longer spin, so the budget grows to twice that; one answered later (the
//    peer was descheduled, or is slow) halves it. A machine whose cores are shared thus spins
//    less, and one that frees up spins again after one quick answer, instead of the old rule
//    that turned spinning off for good after one slow yield. When the answer came is when the
//    writer rang (`rung_ns`), not when the sleeper woke: on a busy machine a wake-up alone can
//    take longer than kMaxSpin, and counting it would turn spinning off for good again.
//    The longest useful spin is what a sleep costs (spin-then-sleep loses at most 2x to knowing
//    the answer's time), so the ceiling is kMaxSpin or twice the wake-ups this thread has seen
//    (ring to waking, `wake_s`), whichever is more, up to kSpinCeiling. Without it, two PEs whose
//    wake-ups take longer than kMaxSpin (a core shared with other work) settle into sleeping on
//    every wait: each answer comes after the other's wake-up, too late to grow the budget, and
//    every round trip costs two wake-ups (79 us against 330 ns spinning, with one busy process
//    beside a 2-PE job on 2 cores).
//    kSpinCeiling is longer than a scheduler tick (4 ms at HZ=250, 10 ms at HZ=100), because on a
//    busy machine that is what a wait for a descheduled peer lasts: the peer gets its core back at
//    a tick, and a waiter still spinning then sees the answer at once, where one that went to sleep
//    is woken onto a core that another task holds and waits for the next tick too. With one busy
//    process beside a 2-PE job on 2 cores, 20 x 10,000 round trips (mpi4py, which spins without
//    end, beside it: mean 5.5-10 us, p99 5-7.5 us): a 500 us ceiling, mean 59-69 us and p99 1.1 ms;
//    2 ms, mean 143-161 us and p99 4 ms (it spins, then sleeps all the same); 5 ms, mean 8.1-8.8 us
//    and p99 3.8-5.0 us; 20 ms, mean 6.8-8.6 us and p99 3.8-4.3 us. Yielding during the spin was
//    tried too (sched_yield every 256 polls): the median went from 1.4 to about 40 us, since a yield
//    hands the core to the busy process for a whole slice. On an idle machine wake-ups are short,
//    so the ceiling (twice them) stays near kMaxSpin and a long wait soon sleeps.
// 2b. Where PEs outnumber cores (no spin), yield (sched_yield) between polls for up to kYieldFor:
//    the awaited PE is often runnable on this very core, and a yield hands it the core at once,
//    where a futex sleep and wake-up costs tens of microseconds a hand-over on a VM (a 4-PE
//    barrier on 2 cores took 100 us sleeping, against 10 us for Open MPI, which yields).
// 3. Sleep in FUTEX_WAIT on a Doorbell: the writer whose store can end the wait rings it
//    (ring(): one load when nobody sleeps, a FUTEX_WAKE when somebody does), so a sleeping
//    PE gives its core away and still wakes within a scheduler wake-up. The sleep has a
//    timeout (kMinSleep doubling to kMaxSleep) because some writes ring nothing (stores into
//    rt.peer() views, Triton atomics through remote_ptr), and the checks below must run.
//    No lost wake-up: the sleeper counts itself in `sleepers`, then reads `seq`, then polls
//    once more; the writer stores, fences, then reads `sleepers` and bumps `seq` before waking.
//    With seq_cst on both sides either the writer sees the sleeper or the sleeper sees the store.
// Every kCheckEvery (and after a signal interrupts a sleep): dead peers, Ctrl-C, deadlock, stall.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "../backend.hpp"

namespace unishmem {

// Python passes the seconds (their defaults live once, in pysrc/unishmem/_config.py).
struct WaitPolicy {
  double stall_warn_s = 0;     // report once what is being waited for (NOTE [stall reports]); <= 0: never
  double timeout_s = 0;        // then raise; <= 0 waits forever
  double deadlock_s = 0;       // every PE waiting this long with no progress is a deadlock; <= 0: never
  double max_spin_s = 0.0;     // the most a wait spins before sleeping (HostBackend sets it)
  bool yield = false;          // yield before sleeping (HostBackend sets it where PEs outnumber cores)
};

// A futex word in shared memory, rung by writers whose store can end a sleeper's wait.
struct alignas(64) Doorbell {
  std::uint32_t seq = 0;       // bumped by every ring that finds sleepers; the futex word
  std::uint32_t sleepers = 0;  // threads (of any PE) asleep on it, or about to be
  std::int64_t rung_ns = 0;    // steady_clock (system-wide) time of the last such ring
};

// The spin the next wait of a thread starts with (NOTE [wait phases]).
struct SpinState {
  double budget_s = 0.0;
  double wake_s = 0.0;  // recent wake-ups from a ring, smoothed: what a sleep costs this thread
};

constexpr int kMinSpinPolls = 128;                               // always, before the clock is read
constexpr double kMaxSpin = 50e-6;                               // about what a sleep and wake-up cost here
constexpr double kSpinCeiling = 20e-3;                           // never spin longer: over a tick at HZ >= 100
constexpr auto kYieldFor = std::chrono::microseconds(500);       // then sleep: a long wait burns no core
constexpr auto kMinSleep = std::chrono::microseconds(50);        // first futex timeout
constexpr auto kMaxSleep = std::chrono::milliseconds(1);         // longest: bounds an unrung write's delay
constexpr auto kCheckEvery = std::chrono::milliseconds(10);      // dead peers, Ctrl-C, stalls

// Called periodically during a wait; throws to abort it (dead peer, Ctrl-C).
using WaitCheck = std::function<void()>;

int available_cpus();  // CPUs this process may run on
// NOTE [stall reports]: a wait that outlives policy.stall_warn_s reports once what it waits for,
// through the reporter the bindings install at import (a Python warning). It is called on the
// waiting thread, without the GIL; it may throw to end the wait (warnings turned into errors).
using StallReporter = void (*)(const std::string& what, double seconds);
void set_stall_reporter(StallReporter reporter);
void report_stall(const std::string& what, double seconds);
[[noreturn]] void raise_timeout(const std::string& what, double seconds);
// FUTEX_WAIT on bell.seq while it still holds `seen`, for at most `timeout`; false if a signal
// interrupted it. Works across processes: the doorbell lives in a shared mapping.
bool futex_sleep(Doorbell& bell, std::uint32_t seen, std::chrono::nanoseconds timeout);
void futex_wake_all(Doorbell& bell);
void yield_cpu();

// The writer's side: call after a store that may end a wait on this doorbell.
inline void ring(Doorbell& bell) {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the store is visible before we look for sleepers
  if (std::atomic_ref<std::uint32_t>(bell.sleepers).load(std::memory_order_seq_cst) == 0) return;
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  std::atomic_ref<std::int64_t>(bell.rung_ns).store(std::chrono::nanoseconds(now).count(), std::memory_order_relaxed);
  std::atomic_ref<std::uint32_t>(bell.seq).fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(bell);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The new budget after a wait that spun `budget_s` and was answered `answered_s` after it
// began (NOTE [wait phases]); `ceiling_s` is spin_ceiling's.
inline double learn_spin(double budget_s, double answered_s, double ceiling_s) {
  if (answered_s <= budget_s) return budget_s;  // the spin caught it
  if (answered_s <= ceiling_s) return std::min(ceiling_s, 2 * answered_s);
  return budget_s / 2 < 1e-7 ? 0.0 : budget_s / 2;
}

// The longest a wait spins: 0 where the policy spins not at all, else kMaxSpin or twice this
// thread's wake-ups, up to kSpinCeiling (NOTE [wait phases]).
inline double spin_ceiling(const SpinState& spin, double max_spin_s) {
  return max_spin_s <= 0 ? 0.0 : std::min(kSpinCeiling, std::max(max_spin_s, 2 * spin.wake_s));
}

// `check` is a template parameter, not a WaitCheck: a std::function built per wait allocates.
template <class Done, class Describe, class Check>
void wait_for(Done&& done, Describe&& describe, const WaitPolicy& policy, SpinState& spin, Doorbell& bell,
              Check&& check) {
  for (int i = 0; i < kMinSpinPolls; ++i)
    if (done()) return;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const double ceiling = spin_ceiling(spin, policy.max_spin_s);
  const double budget = std::min(spin.budget_s, ceiling);
  auto learn = [&] {  // after a sleep: the answer came with the last ring since the wait began, if any
    const auto rung = clock::time_point(std::chrono::duration_cast<clock::duration>(std::chrono::nanoseconds(
        std::atomic_ref<std::int64_t>(bell.rung_ns).load(std::memory_order_relaxed))));
    const auto now = clock::now();
    if (rung > start) spin.wake_s = (spin.wake_s + std::chrono::duration<double>(now - rung).count()) / 2;
    const auto answered = rung > start ? rung : now;
    spin.budget_s = learn_spin(budget, std::chrono::duration<double>(answered - start).count(),
                               spin_ceiling(spin, policy.max_spin_s));
  };
  if (budget > 0) {
    const auto until = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(budget));
    for (unsigned i = 1;; ++i) {
      if (done()) return;
      cpu_relax();
      if (i % 16 == 0 && clock::now() >= until) break;
    }
  }
  if (policy.yield) {
    const auto until = start + kYieldFor;
    do {
      yield_cpu();
      if (done()) return;
    } while (clock::now() < until);
  }
  std::atomic_ref<std::uint32_t> sleepers(bell.sleepers), seq(bell.seq);
  auto next_check = start + kCheckEvery;  // a check reads /proc: not on every short wait
  bool warned = false;
  clock::duration sleep = kMinSleep;
  for (;;) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = seq.load(std::memory_order_seq_cst);
    bool interrupted = false;
    if (!done()) interrupted = !futex_sleep(bell, seen, sleep);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (done()) {
      learn();
      return;
    }
    sleep = std::min<clock::duration>(sleep * 2, kMaxSleep);
    const auto now = clock::now();
    if (now < next_check && !interrupted) continue;
    next_check = now + kCheckEvery;
    try {
      check();
    } catch (const Error& e) {
      // A peer that did its part just before it left ends the wait; a deadlock, which every PE
      // raises, stands: what came true since is another PE's next call (NOTE [taken-back arrival]).
      if (e.kind != ErrorKind::deadlock && done()) return;
      throw;
    } catch (...) {  // Ctrl-C (KeyboardInterrupt), as a peer's failure above
      if (done()) return;
      throw;
    }
    const double waited = std::chrono::duration<double>(now - start).count();
    if (!warned && policy.stall_warn_s > 0 && waited > policy.stall_warn_s) {
      report_stall(describe(), waited);
      warned = true;
    }
    if (policy.timeout_s > 0 && waited > policy.timeout_s) raise_timeout(describe(), waited);
  }
}

}  // namespace unishmem
