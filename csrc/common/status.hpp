// NOTE [status check]: every status a library call returns goes through check_status (like
// mpi4py's CHKERR): a nonzero one becomes an Error of the given kind whose message names the call,
// carrying the library's code, which the bindings put on the Python exception as `.code`.
#pragma once

#include <utility>

#include "../backend.hpp"

namespace unishmem {

// `message` is called only on failure, with the code: building it costs nothing on success.
template <class Message> void check_status(int rc, ErrorKind kind, Message&& message) {
  if (rc != 0) [[unlikely]]
    throw Error(kind, std::forward<Message>(message)(rc), rc);
}

}  // namespace unishmem
