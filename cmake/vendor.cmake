# Vendor backends: each is built only when its SDK is found; otherwise CMake says which
# piece is missing and the package builds without it (the host backend never depends on them).

set(_vendor_sources csrc/bindings.cpp csrc/dtype.cpp csrc/common/collective.cpp csrc/vendor/vendor_backend.cpp
                    csrc/host/allocator.cpp csrc/host/wait.cpp)
set(_site_dirs ${Python_SITEARCH} ${Python_SITELIB})
list(REMOVE_DUPLICATES _site_dirs)

# ---- NVSHMEM: unishmem._nvshmem -----------------------------------------------------------------
# Found in NVSHMEM_HOME, else the nvidia-nvshmem-cu12/-cu13 wheel in the target site-packages.
# CUDA headers and the static CUDA runtime: CUDA_HOME / CUDA_PATH, /usr/local/cuda, else the
# nvidia-cuda-runtime wheel. CUDA 13 keeps cuda/atomic (needed by the NVSHMEM headers) under include/cccl.
set(NVSHMEM_HOME "$ENV{NVSHMEM_HOME}" CACHE PATH "NVSHMEM install prefix (else the pip wheel is used)")
set(_nv_prefixes ${NVSHMEM_HOME})
foreach(_s IN LISTS _site_dirs)
  list(APPEND _nv_prefixes "${_s}/nvidia/nvshmem")
endforeach()
find_path(UNISHMEM_NVSHMEM_INCLUDE nvshmem_host.h PATHS ${_nv_prefixes} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_file(UNISHMEM_NVSHMEM_LIBRARY NAMES libnvshmem_host.so.3 libnvshmem_host.so PATHS ${_nv_prefixes}
          PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)

set(_cuda_prefixes $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda)
foreach(_s IN LISTS _site_dirs)
  list(APPEND _cuda_prefixes "${_s}/nvidia/cu13" "${_s}/nvidia/cuda_runtime")
endforeach()
find_path(UNISHMEM_CUDA_INCLUDE cuda_runtime.h PATHS ${_cuda_prefixes} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(UNISHMEM_CUDART_STATIC NAMES libcudart_static.a PATHS ${_cuda_prefixes} PATH_SUFFIXES lib64 lib
             NO_DEFAULT_PATH)
set(_cccl_dirs)
foreach(_p IN LISTS _cuda_prefixes)
  list(APPEND _cccl_dirs "${_p}/include/cccl")
endforeach()
foreach(_s IN LISTS _site_dirs)
  list(APPEND _cccl_dirs "${_s}/nvidia/cuda_cccl/include")
endforeach()
find_path(UNISHMEM_CUDA_CCCL cuda/atomic PATHS ${UNISHMEM_CUDA_INCLUDE} ${_cccl_dirs} NO_DEFAULT_PATH)

set(_nv_missing)
if(NOT UNISHMEM_NVSHMEM_INCLUDE)
  list(APPEND _nv_missing "NVSHMEM headers (nvshmem_host.h: set NVSHMEM_HOME or pip install nvidia-nvshmem-cu13)")
endif()
if(NOT UNISHMEM_NVSHMEM_LIBRARY)
  list(APPEND _nv_missing "libnvshmem_host.so.3")
endif()
if(NOT UNISHMEM_CUDA_INCLUDE)
  list(APPEND _nv_missing "CUDA headers (cuda_runtime.h: set CUDA_HOME)")
endif()
if(NOT UNISHMEM_CUDART_STATIC)
  list(APPEND _nv_missing "the static CUDA runtime (libcudart_static.a)")
endif()
if(NOT UNISHMEM_CUDA_CCCL)
  list(APPEND _nv_missing "CUDA's cuda/atomic header (CCCL)")
endif()

if(_nv_missing)
  list(JOIN _nv_missing "; " _why)
  message(STATUS "unishmem: NVSHMEM backend not built: missing ${_why}")
else()
  message(STATUS "unishmem: NVSHMEM backend: headers ${UNISHMEM_NVSHMEM_INCLUDE}, library ${UNISHMEM_NVSHMEM_LIBRARY}, "
                 "CUDA headers ${UNISHMEM_CUDA_INCLUDE}")
  get_filename_component(_nv_libdir "${UNISHMEM_NVSHMEM_LIBRARY}" DIRECTORY)
  pybind11_add_module(_nvshmem ${_vendor_sources})
  target_compile_definitions(_nvshmem PRIVATE UNISHMEM_NVSHMEM UNISHMEM_MODULE_NAME=_nvshmem)
  target_compile_options(_nvshmem PRIVATE -Wall -Wextra)
  target_include_directories(_nvshmem SYSTEM PRIVATE ${UNISHMEM_NVSHMEM_INCLUDE} ${UNISHMEM_CUDA_INCLUDE}
                                                     ${UNISHMEM_CUDA_CCCL})
  # Linked against the host library only (no device link). Python preloads the library it found
  # before importing the module; the run paths cover an install beside the wheel and this build.
  target_link_libraries(_nvshmem PRIVATE ${UNISHMEM_NVSHMEM_LIBRARY} ${UNISHMEM_CUDART_STATIC} dl pthread rt)
  set_target_properties(_nvshmem PROPERTIES INSTALL_RPATH "$ORIGIN/../nvidia/nvshmem/lib;${_nv_libdir}"
                                            BUILD_RPATH "${_nv_libdir}")
  install(TARGETS _nvshmem DESTINATION unishmem)
endif()

# ---- rocSHMEM: unishmem._rocshmem -----------------------------------------------------------------
# Compiled as HIP by ROCm's clang (what hipcc drives) with -fgpu-rdc and position-independent
# code, for the architectures in UNISHMEM_ROCM_ARCHS, and linked with roc::rocshmem.
set(UNISHMEM_ROCM_ARCHS "gfx942;gfx950" CACHE STRING "AMD GPU architectures of the rocSHMEM backend")
if(DEFINED ENV{ROCM_PATH})
  set(_rocm "$ENV{ROCM_PATH}")
else()
  set(_rocm /opt/rocm)
endif()
find_program(UNISHMEM_HIPCC hipcc HINTS "${_rocm}/bin" NO_DEFAULT_PATH)
find_program(UNISHMEM_HIPCC hipcc)
if(NOT UNISHMEM_HIPCC)
  message(STATUS "unishmem: rocSHMEM backend not built: missing hipcc (looked in ROCM_PATH=${_rocm}/bin and PATH)")
else()
  find_package(rocshmem CONFIG QUIET HINTS "${_rocm}" PATHS "${_rocm}/lib/cmake/rocshmem")
  if(NOT rocshmem_FOUND)
    message(STATUS "unishmem: rocSHMEM backend not built: missing the rocSHMEM CMake package "
                   "(find_package(rocshmem CONFIG) found none under ROCM_PATH=${_rocm})")
  else()
    message(STATUS "unishmem: rocSHMEM backend: ${rocshmem_DIR}, architectures ${UNISHMEM_ROCM_ARCHS}")
    if(NOT CMAKE_HIP_COMPILER AND EXISTS "${_rocm}/llvm/bin/clang++")
      set(CMAKE_HIP_COMPILER "${_rocm}/llvm/bin/clang++")
    endif()
    set(CMAKE_HIP_ARCHITECTURES "${UNISHMEM_ROCM_ARCHS}")
    enable_language(HIP)
    pybind11_add_module(_rocshmem ${_vendor_sources})
    set_source_files_properties(csrc/bindings.cpp csrc/vendor/vendor_backend.cpp TARGET_DIRECTORY _rocshmem
                                PROPERTIES LANGUAGE HIP)
    target_compile_definitions(_rocshmem PRIVATE UNISHMEM_ROCSHMEM UNISHMEM_MODULE_NAME=_rocshmem)
    set_target_properties(_rocshmem PROPERTIES POSITION_INDEPENDENT_CODE ON HIP_ARCHITECTURES "${UNISHMEM_ROCM_ARCHS}")
    target_compile_options(_rocshmem PRIVATE $<$<COMPILE_LANGUAGE:HIP>:-fgpu-rdc>)
    target_link_options(_rocshmem PRIVATE -fgpu-rdc --hip-link)
    target_link_libraries(_rocshmem PRIVATE roc::rocshmem)
    install(TARGETS _rocshmem DESTINATION unishmem)
  endif()
endif()
