// Deterministic first-fit allocator over [0, capacity): the same sequence of
// calls gives the same offsets on every PE, which is what makes the heap symmetric.
#pragma once

#include <cstddef>
#include <map>
#include <optional>

namespace unishmem {

class Allocator {
 public:
  static constexpr std::size_t kAlign = 256;

  explicit Allocator(std::size_t capacity);
  std::optional<std::size_t> allocate(std::size_t bytes);  // nullopt when no block fits
  bool release(std::size_t offset);                         // false if not a live allocation
  bool is_live(std::size_t offset) const { return used_.count(offset) != 0; }
  std::size_t free_bytes() const;
  std::size_t largest_free_block() const;
  std::size_t capacity() const { return capacity_; }
  std::size_t live_count() const { return used_.size(); }
  static std::size_t rounded(std::size_t bytes);

 private:
  std::size_t capacity_;
  std::map<std::size_t, std::size_t> free_;  // offset -> size, coalesced
  std::map<std::size_t, std::size_t> used_;  // offset -> rounded size
};

}  // namespace unishmem
