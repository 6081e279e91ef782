// The point-to-point calls Python makes in tight loops, without pybind11's dispatch
// (NOTE [fast calls], NOTE [hot calls] in fast_calls.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "backend.hpp"

namespace unishmem {

// Sets the Python exception that matches `e` (unishmem.errors, or ValueError).
void set_error(const Error& e);

// Adds fast_* and hot_* to the backend module, and its HotPath class.
void bind_fast_calls(pybind11::module_& m);

}  // namespace unishmem
