#include "allocator.hpp"

#include <algorithm>

namespace unishmem {

Allocator::Allocator(std::size_t capacity) : capacity_(capacity / kAlign * kAlign) {
  if (capacity_) free_[0] = capacity_;
}

std::size_t Allocator::rounded(std::size_t bytes) {
  return std::max<std::size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
}

std::optional<std::size_t> Allocator::allocate(std::size_t bytes) {
  if (bytes > capacity_) return std::nullopt;
  std::size_t need = rounded(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    std::size_t offset = it->first, left = it->second - need;
    free_.erase(it);
    if (left) free_[offset + need] = left;
    used_[offset] = need;
    return offset;
  }
  return std::nullopt;
}

bool Allocator::release(std::size_t offset) {
  auto u = used_.find(offset);
  if (u == used_.end()) return false;
  std::size_t size = u->second;
  used_.erase(u);
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += size;
      return true;
    }
  }
  free_[offset] = size;
  return true;
}

std::size_t Allocator::free_bytes() const {
  std::size_t total = 0;
  for (auto& [o, s] : free_) total += s;
  return total;
}

std::size_t Allocator::largest_free_block() const {
  std::size_t best = 0;
  for (auto& [o, s] : free_) best = std::max(best, s);
  return best;
}

}  // namespace unishmem
