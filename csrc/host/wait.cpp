#include "wait.hpp"

#include <cstdio>

#include "../backend.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace unishmem::host {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
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
