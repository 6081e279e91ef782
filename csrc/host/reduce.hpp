// Elementwise reduction of several source arrays into one destination.
#pragma once

#include <cstddef>

#include "../backend.hpp"

namespace unishmem::host {

// dest[i] = op(srcs[0][i], ..., srcs[n-1][i]) for i in [0, nelems).
// dest may be one of srcs. Half types accumulate in float.
void reduce_arrays(void* dest, const void* const* srcs, int nsrcs, std::size_t nelems, DType type, ReduceOp op);

}  // namespace unishmem::host
