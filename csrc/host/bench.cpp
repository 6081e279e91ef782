#include "bench.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace unishmem::host::bench {

namespace {

using clock = std::chrono::steady_clock;

double since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

// Writes each iteration's duration to a samples buffer (when there is one).
class Recorder {
 public:
  explicit Recorder(Addr samples) : out_(reinterpret_cast<std::int64_t*>(samples)), last_(clock::now()) {}
  void lap(std::size_t i) {
    if (!out_) return;
    const auto now = clock::now();
    out_[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }

 private:
  std::int64_t* out_;
  clock::time_point last_;
};

// Spin until *word >= target, as fast as the hardware allows (plain loads, no pause): this is
// the reference the backend's waits are compared with. Every 16Ki polls without an answer it
// yields once, so that a peer descheduled on a busy machine gets to run (a round trip of ~100 ns
// never gets there), and every 64Ki it checks the clock.
void spin_until(const std::uint64_t* word, std::uint64_t target, double timeout_s) {
  std::atomic_ref<std::uint64_t> w(*const_cast<std::uint64_t*>(word));
  auto last = clock::now();
  for (std::uint32_t i = 1; w.load(std::memory_order_acquire) < target; ++i) {
    if ((i & 0x3fff) == 0) std::this_thread::yield();
    if ((i & 0xffff) == 0 && since(last) > timeout_s)
      throw Error(ErrorKind::timeout, "raw ping-pong: no answer from the peer within " +
                                          std::to_string(timeout_s) + " s (word is " +
                                          std::to_string(w.load()) + ", waiting for " + std::to_string(target) + ")");
  }
}

}  // namespace

double memcpy_seconds(Addr dest, Addr source, std::size_t bytes, std::size_t iters, std::size_t chunk) {
  auto* d = reinterpret_cast<char*>(dest);
  auto* s = reinterpret_cast<const char*>(source);
  if (chunk == 0 || chunk > bytes) chunk = bytes;
  const auto t0 = clock::now();
  for (std::size_t i = 0; i < iters; ++i) {
    for (std::size_t off = 0; off < bytes; off += chunk) std::memcpy(d + off, s + off, std::min(chunk, bytes - off));
    // Keep the compiler from merging or dropping repeated copies of the same bytes.
    asm volatile("" : : "r"(d) : "memory");
  }
  return since(t0);
}

double raw_pingpong_seconds(Addr mine, Addr theirs, std::size_t iters, bool initiator, std::uint64_t start,
                            double timeout_s, Addr samples) {
  auto* my_word = reinterpret_cast<const std::uint64_t*>(mine);
  std::atomic_ref<std::uint64_t> their_word(*reinterpret_cast<std::uint64_t*>(theirs));
  const auto t0 = clock::now();
  Recorder rec(samples);
  for (std::uint64_t i = 1; i <= iters; ++i) {
    const std::uint64_t ping = start + 2 * i - 1, pong = start + 2 * i;
    if (initiator) {
      their_word.store(ping, std::memory_order_release);
      spin_until(my_word, pong, timeout_s);
    } else {
      spin_until(my_word, ping, timeout_s);
      their_word.store(pong, std::memory_order_release);
    }
    rec.lap(i - 1);
  }
  return since(t0);
}

double signal_pingpong_seconds(Backend& b, Addr dest, Addr source, std::size_t bytes, Addr sig, int peer,
                               std::size_t iters, bool initiator, std::uint64_t start, Addr samples) {
  const auto t0 = clock::now();
  Recorder rec(samples);
  for (std::uint64_t i = 1; i <= iters; ++i) {
    const std::uint64_t ping = start + 2 * i - 1, pong = start + 2 * i;
    if (initiator) {
      b.put_signal(dest, source, bytes, sig, ping, SignalOp::set, peer, 0);
      b.signal_wait_until(sig, Cmp::ge, pong, 0);
    } else {
      b.signal_wait_until(sig, Cmp::ge, ping, 0);
      b.put_signal(dest, source, bytes, sig, pong, SignalOp::set, peer, 0);
    }
    rec.lap(i - 1);
  }
  return since(t0);
}

double barrier_seconds(Backend& b, int team, std::size_t iters, Addr samples) {
  const auto t0 = clock::now();
  Recorder rec(samples);
  for (std::size_t i = 0; i < iters; ++i) {
    b.barrier(team, 0);
    rec.lap(i);
  }
  return since(t0);
}

}  // namespace unishmem::host::bench
