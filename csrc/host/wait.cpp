#include "wait.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "../backend.hpp"

namespace unishmem::host {

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return std::max(1, int(std::thread::hardware_concurrency()));
}

void report_stall(const std::string& what, double seconds) {
  std::fprintf(stderr, "[unishmem] still waiting after %.0f s for %s\n", seconds, what.c_str());
  std::fflush(stderr);
}

void raise_timeout(const std::string& what, double seconds) {
  throw Error(ErrorKind::timeout, "gave up after " + std::to_string(int(seconds)) + " s waiting for " + what +
                                      " (UNISHMEM_WAIT_TIMEOUT sets the limit)");
}

}  // namespace unishmem::host
