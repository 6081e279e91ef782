// POSIX shared-memory segments: one per PE, named by the job token and PE.
#pragma once

#include <cstddef>
#include <string>

namespace unishmem::host {

std::string segment_name(const std::string& token, int pe);

// A mapping of one segment. Owns the mapping (not the name); move-only.
class Mapping {
 public:
  Mapping() = default;
  static Mapping create(const std::string& name, std::size_t bytes);  // O_EXCL, mode 0600, zeroed
  static Mapping open(const std::string& name, std::size_t bytes);
  Mapping(Mapping&& o) noexcept;
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  char* data() const { return data_; }
  std::size_t size() const { return size_; }
  // Drop the shared pages but keep the address range readable and writable
  // (anonymous zero pages), so tensors a user still holds never fault.
  void retire();

 private:
  Mapping(char* data, std::size_t size) : data_(data), size_(size) {}
  char* data_ = nullptr;
  std::size_t size_ = 0;
};

void unlink_segment(const std::string& name);  // ignores a missing name
std::size_t shm_free_bytes();                    // free space of /dev/shm
// Allocates the pages of a segment, so that touching them later can never fault (SIGBUS);
// Error(unavailable) when /dev/shm cannot hold them.
void reserve_segment(const std::string& name, std::size_t bytes);

}  // namespace unishmem::host
