# GPU backends: each is built only when its SDK is found; otherwise CMake says which
# piece is missing and the package builds without it (the host backend never depends on them).
# Both compile the one GPU source (csrc/gpu) against their library's mapping header.

# ---- NVSHMEM: unishmem._nvshmem -----------------------------------------------------------------
# Found in NVSHMEM_HOME, else the nvidia-nvshmem-cu12/-cu13 wheel in the target site-packages.
# CUDA headers and the static CUDA runtime: CUDA_HOME / CUDA_PATH, /usr/local/cuda, else the
# nvidia-cuda-runtime wheel. CUDA 13 keeps cuda/atomic (needed by the NVSHMEM headers) under include/cccl.
set(NVSHMEM_HOME "$ENV{NVSHMEM_HOME}" CACHE PATH "NVSHMEM install prefix (else the pip wheel is used)")
unishmem_site_paths(_nv_wheels nvidia/nvshmem)
set(_nv_prefixes ${NVSHMEM_HOME} ${_nv_wheels})
unishmem_search_anew_for("${_nv_prefixes}" UNISHMEM_NVSHMEM_INCLUDE UNISHMEM_NVSHMEM_LIBRARY)
find_path(UNISHMEM_NVSHMEM_INCLUDE nvshmem_host.h PATHS ${_nv_prefixes} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_file(UNISHMEM_NVSHMEM_LIBRARY NAMES libnvshmem_host.so.3 libnvshmem_host.so PATHS ${_nv_prefixes}
          PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)

unishmem_site_paths(_cuda_wheels nvidia/cu13 nvidia/cuda_runtime)
set(_cuda_prefixes $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda ${_cuda_wheels})
unishmem_search_anew_for("${_cuda_prefixes}" UNISHMEM_CUDA_INCLUDE UNISHMEM_CUDART_STATIC UNISHMEM_CUDA_CCCL)
find_path(UNISHMEM_CUDA_INCLUDE cuda_runtime.h PATHS ${_cuda_prefixes} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(UNISHMEM_CUDART_STATIC NAMES libcudart_static.a PATHS ${_cuda_prefixes} PATH_SUFFIXES lib64 lib
             NO_DEFAULT_PATH)
list(TRANSFORM _cuda_prefixes APPEND /include/cccl OUTPUT_VARIABLE _cccl_dirs)
unishmem_site_paths(_cccl_wheels nvidia/cuda_cccl/include)
list(APPEND _cccl_dirs ${_cccl_wheels})
find_path(UNISHMEM_CUDA_CCCL cuda/atomic PATHS ${UNISHMEM_CUDA_INCLUDE} ${_cccl_dirs} NO_DEFAULT_PATH)

set(_nv_missing)
unishmem_missing(_nv_missing UNISHMEM_NVSHMEM_INCLUDE
                 "NVSHMEM headers (nvshmem_host.h: set NVSHMEM_HOME or pip install nvidia-nvshmem-cu13)")
unishmem_missing(_nv_missing UNISHMEM_NVSHMEM_LIBRARY "libnvshmem_host.so.3")
unishmem_missing(_nv_missing UNISHMEM_CUDA_INCLUDE "CUDA headers (cuda_runtime.h: set CUDA_HOME)")
unishmem_missing(_nv_missing UNISHMEM_CUDART_STATIC "the static CUDA runtime (libcudart_static.a)")
unishmem_missing(_nv_missing UNISHMEM_CUDA_CCCL "CUDA's cuda/atomic header (CCCL)")

if(_nv_missing)
  list(JOIN _nv_missing "; " _why)
  message(STATUS "unishmem: NVSHMEM backend not built: missing ${_why}")
else()
  message(STATUS "unishmem: NVSHMEM backend: headers ${UNISHMEM_NVSHMEM_INCLUDE}, library ${UNISHMEM_NVSHMEM_LIBRARY}, "
                 "CUDA headers ${UNISHMEM_CUDA_INCLUDE}")
  get_filename_component(_nv_libdir "${UNISHMEM_NVSHMEM_LIBRARY}" DIRECTORY)
  unishmem_add_backend(_nvshmem UNISHMEM_NVSHMEM SOURCES csrc/gpu/gpu_backend.cpp)
  target_include_directories(_nvshmem SYSTEM PRIVATE ${UNISHMEM_NVSHMEM_INCLUDE} ${UNISHMEM_CUDA_INCLUDE}
                                                     ${UNISHMEM_CUDA_CCCL})
  # Linked against the host library only (no device link). Python preloads the library it found
  # before importing the module; the run paths cover an install beside the wheel and this build.
  target_link_libraries(_nvshmem PRIVATE ${UNISHMEM_NVSHMEM_LIBRARY} ${UNISHMEM_CUDART_STATIC} dl pthread rt)
  set_target_properties(_nvshmem PROPERTIES INSTALL_RPATH "$ORIGIN/../nvidia/nvshmem/lib;${_nv_libdir}"
                                            BUILD_RPATH "${_nv_libdir}")
endif()

# ---- rocSHMEM: unishmem._rocshmem -----------------------------------------------------------------
# NOTE [rocSHMEM build]: one HIP toolchain for the whole module, and nothing that reaches another target.
# Every source of _rocshmem is compiled as HIP through a generated one-line `.hip` wrapper in the build
# tree (`#include "<source>"`), so no LANGUAGE property is set on a shared source (source properties are
# per directory: setting one here would make _host's bindings.cpp HIP as well). Only _rocshmem links
# roc::rocshmem (and, through it, hip::device/hip::host); it is built without pybind11's LTO flags
# (NO_EXTRAS) and linked by the HIP compiler. rocSHMEM's CMake package links hip::device PUBLIC, so
# hip's package is found first. rocSHMEM >= 3.3 is required (unique-id init, rocshmem_hipmodule_init,
# quiet/sync_all on a stream, ROCSHMEM_TEAM_SHARED); its librocshmem.a must be position-independent
# (-DCMAKE_POSITION_INDEPENDENT_CODE=ON; scripts/ci_rocm.sh builds it so).
# tests/test_vendor.py configures this branch with tests/fixtures/standin_rocm and checks both points.
set(UNISHMEM_ROCM_ARCHS "gfx942;gfx950" CACHE STRING "AMD GPU architectures of the rocSHMEM backend")
set(UNISHMEM_ROCSHMEM_MIN_VERSION 3.3)
if(DEFINED ENV{ROCM_PATH})
  set(_rocm "$ENV{ROCM_PATH}")
else()
  set(_rocm /opt/rocm)
endif()
set(_rocm_why)
if(CMAKE_VERSION VERSION_LESS 3.21)
  set(_rocm_why "CMake >= 3.21 (HIP language support; this is ${CMAKE_VERSION})")
elseif(NOT CMAKE_HIP_COMPILER AND NOT DEFINED ENV{HIPCXX} AND NOT EXISTS "${_rocm}/llvm/bin/clang++")
  set(_rocm_why "ROCm's clang (looked for ${_rocm}/llvm/bin/clang++; set ROCM_PATH, HIPCXX or CMAKE_HIP_COMPILER)")
endif()
if(NOT _rocm_why)
  # hip's package reads GPU_TARGETS for the --offload-arch options hip::device carries.
  set(GPU_TARGETS "${UNISHMEM_ROCM_ARCHS}")
  find_package(hip CONFIG QUIET HINTS "${_rocm}" PATHS "${_rocm}/lib/cmake/hip")
  if(NOT hip_FOUND)
    set(_rocm_why "HIP's CMake package (find_package(hip CONFIG) found none under ROCM_PATH=${_rocm})")
  endif()
endif()
if(NOT _rocm_why)
  find_package(rocshmem ${UNISHMEM_ROCSHMEM_MIN_VERSION} CONFIG QUIET HINTS "${_rocm}"
               PATHS "${_rocm}/lib/cmake/rocshmem")
  if(NOT rocshmem_FOUND)
    if(rocshmem_CONSIDERED_VERSIONS)
      set(_seen ${rocshmem_CONSIDERED_VERSIONS})
      set(_where ${rocshmem_CONSIDERED_CONFIGS})
      list(REMOVE_DUPLICATES _seen)
      list(REMOVE_DUPLICATES _where)
      list(JOIN _seen ", " _seen)
      list(JOIN _where ", " _where)
      string(CONCAT _rocm_why "rocSHMEM >= ${UNISHMEM_ROCSHMEM_MIN_VERSION} (found version ${_seen} at ${_where}; "
                    "ROCm 7.2 ships 3.2.x: build rocSHMEM from source as scripts/ci_rocm.sh does)")
    else()
      set(_rocm_why "the rocSHMEM CMake package (find_package(rocshmem CONFIG) found none under ROCM_PATH=${_rocm})")
    endif()
  endif()
endif()

if(_rocm_why)
  message(STATUS "unishmem: rocSHMEM backend not built: missing ${_rocm_why}")
else()
  message(STATUS "unishmem: rocSHMEM backend: rocSHMEM ${rocshmem_VERSION} (${rocshmem_DIR}), "
                 "architectures ${UNISHMEM_ROCM_ARCHS}")
  if(NOT CMAKE_HIP_COMPILER AND NOT DEFINED ENV{HIPCXX})
    set(CMAKE_HIP_COMPILER "${_rocm}/llvm/bin/clang++")
  endif()
  # Set before enable_language: otherwise CMake asks a GPU for its architecture.
  set(CMAKE_HIP_ARCHITECTURES "${UNISHMEM_ROCM_ARCHS}")
  enable_language(HIP)
  set(_roc_sources)
  foreach(_src IN LISTS UNISHMEM_COMMON_SOURCES ITEMS csrc/gpu/gpu_backend.cpp)
    string(MAKE_C_IDENTIFIER "${_src}" _id)
    set(_wrapper "${CMAKE_CURRENT_BINARY_DIR}/rocshmem_hip/${_id}.hip")
    file(CONFIGURE OUTPUT "${_wrapper}" CONTENT "#include \"${CMAKE_CURRENT_SOURCE_DIR}/${_src}\"\n" @ONLY)
    list(APPEND _roc_sources "${_wrapper}")
  endforeach()
  unishmem_add_backend(_rocshmem UNISHMEM_ROCSHMEM NO_EXTRAS NO_COMMON SOURCES ${_roc_sources})
  target_compile_options(_rocshmem PRIVATE -fgpu-rdc)
  target_link_options(_rocshmem PRIVATE -fgpu-rdc --hip-link)
  set_target_properties(_rocshmem PROPERTIES HIP_STANDARD 20 HIP_STANDARD_REQUIRED ON HIP_VISIBILITY_PRESET hidden
                                             HIP_ARCHITECTURES "${UNISHMEM_ROCM_ARCHS}" LINKER_LANGUAGE HIP
                                             POSITION_INDEPENDENT_CODE ON INTERPROCEDURAL_OPTIMIZATION OFF)
  target_link_libraries(_rocshmem PRIVATE roc::rocshmem)
endif()
