#include "wait.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <ctime>
#include <thread>

#include "../backend.hpp"

namespace unishmem {

void yield_cpu() { sched_yield(); }

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return std::max(1, int(std::thread::hardware_concurrency()));
}

namespace {
std::atomic<StallReporter> g_stall_reporter{nullptr};
}  // namespace

void set_stall_reporter(StallReporter reporter) { g_stall_reporter.store(reporter); }

void report_stall(const std::string& what, double seconds) {
  if (const StallReporter reporter = g_stall_reporter.load()) reporter(what, seconds);
}

void raise_timeout(const std::string& what, double seconds) {
  throw Error(ErrorKind::timeout, "gave up after " + std::to_string(int(seconds)) + " s waiting for " + what +
                                      " (UNISHMEM_WAIT_TIMEOUT sets the limit)");
}

// Not FUTEX_PRIVATE: sleepers and wakers are different processes mapping the same segment.
bool futex_sleep(Doorbell& bell, std::uint32_t seen, std::chrono::nanoseconds timeout) {
  const auto ns = timeout.count();
  const timespec ts{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
  if (syscall(SYS_futex, &bell.seq, FUTEX_WAIT, seen, &ts, nullptr, 0) == 0) return true;
  return errno != EINTR;  // EAGAIN: rung in between; ETIMEDOUT: look again
}

void futex_wake_all(Doorbell& bell) { syscall(SYS_futex, &bell.seq, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

}  // namespace unishmem
