; NOTE [rocSHMEM module globals]: rocshmem_hipmodule_init fails unless the module defines all three
; of ROCSHMEM_CTX_DEFAULT (16 bytes), ROCSHMEM_TEAM_WORLD and ROCSHMEM_TEAM_SHARED (8 bytes each):
; it looks each up with hipModuleGetGlobal and returns ROCSHMEM_ERROR on the first one missing
; (rocSHMEM src/rocshmem_gpu.cpp, rocm-systems fe14a430). Triton links rocSHMEM's bitcode with
; LinkOnlyNeeded, which imports a global only where the kernel already refers to it, so a kernel that
; never touches a team would lose the team globals. Triton links this file first (its extern_libs key
; matches every rocSHMEM symbol too, triton_support.extern_libs): LinkOnlyNeeded always imports an
; appending global, so @llvm.used brings these declarations into every kernel that calls rocSHMEM,
; rocSHMEM's bitcode then supplies their definitions, and @llvm.used keeps them through -O3.
; Address spaces as rocSHMEM declares them: __device__ ROCSHMEM_CTX_DEFAULT (1), __constant__ teams (4).
; Declarations only: nothing of rocSHMEM is in this file.

@ROCSHMEM_CTX_DEFAULT = external addrspace(1) global { ptr, ptr }
@ROCSHMEM_TEAM_WORLD = external addrspace(4) global ptr
@ROCSHMEM_TEAM_SHARED = external addrspace(4) global ptr

@llvm.used = appending global [3 x ptr] [ptr addrspacecast (ptr addrspace(1) @ROCSHMEM_CTX_DEFAULT to ptr), ptr addrspacecast (ptr addrspace(4) @ROCSHMEM_TEAM_WORLD to ptr), ptr addrspacecast (ptr addrspace(4) @ROCSHMEM_TEAM_SHARED to ptr)], section "llvm.metadata"
