# unishmem_add_backend(<module> <define> [NO_EXTRAS] [NO_COMMON] SOURCES <file>...)
# One backend's extension module unishmem.<module>: UNISHMEM_COMMON_SOURCES plus its own, compiled
# with <define> and UNISHMEM_MODULE_NAME=<module>, installed into the package. NO_EXTRAS is
# pybind11's (no LTO flags); NO_COMMON: SOURCES already holds everything (the rocSHMEM module passes
# a HIP wrapper of every source, NOTE [rocSHMEM build] in cmake/gpu.cmake).
function(unishmem_add_backend module define)
  cmake_parse_arguments(PARSE_ARGV 2 arg "NO_EXTRAS;NO_COMMON" "" "SOURCES")
  set(sources ${arg_SOURCES})
  if(NOT arg_NO_COMMON)
    list(PREPEND sources ${UNISHMEM_COMMON_SOURCES})
  endif()
  set(extras)
  if(arg_NO_EXTRAS)
    set(extras NO_EXTRAS)
  endif()
  pybind11_add_module(${module} ${extras} ${sources})
  target_compile_definitions(${module} PRIVATE ${define} UNISHMEM_MODULE_NAME=${module})
  target_compile_options(${module} PRIVATE -Wall -Wextra)
  install(TARGETS ${module} DESTINATION unishmem)
endfunction()

# unishmem_site_paths(<out> <suffix>...): <dir>/<suffix> for every site-packages directory of the
# target Python and every suffix, in that order (where pip wheels put SDK files).
function(unishmem_site_paths out)
  set(site_dirs ${Python_SITEARCH} ${Python_SITELIB})
  list(REMOVE_DUPLICATES site_dirs)
  set(paths)
  foreach(dir IN LISTS site_dirs)
    foreach(suffix IN LISTS ARGN)
      list(APPEND paths "${dir}/${suffix}")
    endforeach()
  endforeach()
  set(${out} ${paths} PARENT_SCOPE)
endfunction()

# unishmem_search_anew_for(<places> <var>...): forget the cached find results <var>... when the places they
# were searched in differ from last time, so that a build directory reused by another environment (another
# venv, another NVSHMEM wheel) does not keep the first one's headers and libraries.
function(unishmem_search_anew_for places)
  string(MAKE_C_IDENTIFIER "${ARGV1}" key)
  if(NOT "${places}" STREQUAL "${UNISHMEM_SEARCHED_${key}}")
    foreach(var IN LISTS ARGN)
      unset(${var} CACHE)
    endforeach()
    set(UNISHMEM_SEARCHED_${key} "${places}" CACHE INTERNAL "where ${ARGN} were found")
  endif()
endfunction()

# unishmem_missing(<list> <var> <what>): appends <what> to <list> where the find result <var> is unset
# or NOTFOUND, so that CMake can say every missing piece at once.
function(unishmem_missing list var what)
  if(NOT ${var})
    set(${list} ${${list}} "${what}" PARENT_SCOPE)
  endif()
endfunction()
