#include "segment.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../backend.hpp"

namespace unishmem::host {

namespace {
[[noreturn]] void fail(const std::string& what, const std::string& name) {
  throw Error(ErrorKind::generic, what + " '" + name + "': " + std::strerror(errno));
}

char* map_fd(int fd, std::size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int saved = errno;
  close(fd);
  errno = saved;
  if (p == MAP_FAILED) fail("mmap of shared-memory segment failed", name);
  return static_cast<char*>(p);
}
}  // namespace

std::string segment_name(const std::string& token, int pe) {
  return "/unishmem-" + token + "-" + std::to_string(pe);
}

Mapping Mapping::create(const std::string& name, std::size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail("shm_open(create) failed", name);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int saved = errno;
    close(fd);
    shm_unlink(name.c_str());
    errno = saved;
    fail("ftruncate of shared-memory segment failed", name);
  }
  return Mapping(map_fd(fd, bytes, name), bytes);
}

Mapping Mapping::open(const std::string& name, std::size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) fail("shm_open of a peer's segment failed", name);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    close(fd);
    throw Error(ErrorKind::symmetry, "segment '" + name + "' has " + std::to_string(st.st_size) +
                                         " bytes, expected " + std::to_string(bytes) +
                                         ": PEs were started with different heap sizes");
  }
  return Mapping(map_fd(fd, bytes, name), bytes);
}

Mapping::Mapping(Mapping&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

Mapping::~Mapping() {
  if (data_) munmap(data_, size_);
}

void Mapping::retire() {
  if (!data_) return;
  // MAP_FIXED replaces the shared pages atomically; on failure fall back to unmapping.
  void* p = mmap(data_, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) munmap(data_, size_);
  data_ = nullptr;  // the anonymous range stays reserved for the life of the process
  size_ = 0;
}

void unlink_segment(const std::string& name) { shm_unlink(name.c_str()); }

void reserve_segment(const std::string& name, std::size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) fail("shm_open of this PE's segment failed", name);
  int rc;
  do rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  while (rc == EINTR);
  close(fd);
  if (rc != 0)
    throw Error(rc == ENOSPC ? ErrorKind::unavailable : ErrorKind::generic,
                "reserving " + std::to_string(bytes) + " bytes of /dev/shm for segment '" + name + "' failed: " +
                    std::strerror(rc) + " (" + std::to_string(shm_free_bytes()) +
                    " bytes free now): lower heap_size or UNISHMEM_SYMMETRIC_SIZE, or enlarge /dev/shm");
}

std::size_t shm_free_bytes() {
  struct statvfs st {};
  if (statvfs("/dev/shm", &st) != 0) return 0;
  return static_cast<std::size_t>(st.f_bavail) * st.f_frsize;
}

}  // namespace unishmem::host
