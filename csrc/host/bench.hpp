// Timed loops for `unishmem bench`: the references (memcpy, a raw shared-memory atomic
// ping-pong) and the backend's own signalling and barrier, each timed in C++ so that no
// Python overhead is counted. Benchmark helpers only; nothing here is on a hot path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../backend.hpp"

namespace unishmem::host::bench {

// Seconds taken by `iters` copies of `bytes` from source to dest, each made of memcpy calls of
// `chunk` bytes (0: one call) over consecutive pieces, as a collective moves its blocks.
double memcpy_seconds(Addr dest, Addr source, std::size_t bytes, std::size_t iters, std::size_t chunk);

// Raw ping-pong between two processes over two 8-byte words in shared memory: the initiator
// stores into `theirs` (the word the peer spins on) and spins on `mine`, the responder answers.
// Plain std::atomic_ref stores and loads, no backend code (a yield after 16Ki unanswered polls). Words count up from `start`, so the
// same pair of words can be reused by passing the previous call's start + 2 * iters.
// Returns the seconds for `iters` round trips; gives up after `timeout_s` without progress.
// Every loop below also writes each iteration's nanoseconds to `samples` (int64[iters]) unless it is 0.
double raw_pingpong_seconds(Addr mine, Addr theirs, std::size_t iters, bool initiator, std::uint64_t start,
                            double timeout_s, Addr samples);

// The same ping-pong through the backend: put_signal of `bytes` bytes (signal SET) to `peer`,
// then signal_wait_until(sig >= expected). Same word-numbering rule as above.
double signal_pingpong_seconds(Backend& b, Addr dest, Addr source, std::size_t bytes, Addr sig, int peer,
                               std::size_t iters, bool initiator, std::uint64_t start, Addr samples);

// Seconds for `iters` back-to-back barriers on `team`.
double barrier_seconds(Backend& b, int team, std::size_t iters, Addr samples);

}  // namespace unishmem::host::bench
