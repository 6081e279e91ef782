"""NOTE [vendor mapping]: every difference between NVSHMEM and rocSHMEM that the device library
sees lives in this file, once: symbol prefixes and scope suffixes, enum numbering, the type names
in symbols, the team handle's type, and the warp width. Everything else is written once for both.
Which vendor a compile target links, and its bitcode, are the backend registry's (NOTE [backend registry]
in unishmem/backends.py)."""

import triton.language as tl

from ..backends import BACKENDS

# Triton backend name -> the vendor key of the tables below, from the registry
VENDOR_OF_BACKEND = {b.triton_backend: b.name for b in BACKENDS.values() if b.triton_backend}

# unified scope suffix -> (symbol prefix, symbol suffix)
SCOPES = {
    "nvshmem": {"": ("nvshmem_", ""), "_block": ("nvshmemx_", "_block"), "_warp": ("nvshmemx_", "_warp")},
    "rocshmem": {"": ("rocshmem_", ""), "_block": ("rocshmem_", "_wg"), "_warp": ("rocshmem_", "_wave")},
}

# this package's SIGNAL / CMP numbers (unishmem.SIGNAL, unishmem.CMP) -> the vendor's
SIGNAL_VALUES = {
    "nvshmem": {0: 9, 1: 10},  # NVSHMEM 3.x: NVSHMEM_SIGNAL_SET = 9, NVSHMEM_SIGNAL_ADD = 10
    "rocshmem": {0: 0, 1: 1},
}
CMP_VALUES = {
    "nvshmem": {0: 0, 1: 1, 2: 2, 3: 5, 4: 4, 5: 3},  # EQ NE GT LE LT GE in NVSHMEM's order
    "rocshmem": {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5},
}

# element type -> the type name inside typed symbols (nvshmem_float_put, rocshmem_int_wait_until...)
RMA_TYPES = {
    "nvshmem": {
        tl.float16: "half",
        tl.bfloat16: "bfloat16",
        tl.float32: "float",
        tl.float64: "double",
        tl.int8: "int8",
        tl.int16: "int16",
        tl.int32: "int32",
        tl.int64: "int64",
        tl.uint8: "uint8",
        tl.uint16: "uint16",
        tl.uint32: "uint32",
        tl.uint64: "uint64",
    },
    "rocshmem": {
        tl.float32: "float",
        tl.float64: "double",
        tl.int8: "schar",
        tl.int16: "short",
        tl.int32: "int",
        tl.int64: "long",
        tl.uint8: "uchar",
        tl.uint16: "ushort",
        tl.uint32: "uint",
        tl.uint64: "ulong",
    },
}
# Element types whose single-element put (`p`) a vendor sends as integer bits of the same width: NVSHMEM's
# nvshmem_half_p and nvshmem_bfloat16_p make the LLVM of Triton 3.6 to 3.8 fail an assertion in instruction
# selection (SelectionDAG::ReplaceAllUsesWith), and nvshmem_uint16_p stores the same two bytes.
P_AS_BITS = {"nvshmem": {tl.float16: tl.uint16, tl.bfloat16: tl.uint16}, "rocshmem": {}}
WAIT_TYPES = {
    "nvshmem": {tl.int32: "int32", tl.int64: "int64", tl.uint64: "uint64"},
    "rocshmem": {tl.int32: "int", tl.int64: "long", tl.uint64: "uint64"},
}
# The reductions' type names are the vendor's RMA ones; these are the element types each reduces.
REDUCE_TYPES = {
    "nvshmem": {
        t: RMA_TYPES["nvshmem"][t]
        for t in (tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.int8, tl.int16, tl.int32, tl.int64, tl.uint8)
    },
    "rocshmem": {t: RMA_TYPES["rocshmem"][t] for t in (tl.float32, tl.float64, tl.int16, tl.int32, tl.int64)},
}
# The vendor AMOs' type names: C's, which both vendors define for every AMO (NVSHMEM 3.8's bitcode
# has no nvshmem_int64_atomic_fetch_add, but nvshmem_long_atomic_fetch_add; 64-bit long on Linux).
AMO_TYPES = {tl.int32: "int", tl.int64: "long", tl.uint32: "uint", tl.uint64: "ulong"}
TYPE_TABLES = {"rma": RMA_TYPES, "wait": WAIT_TYPES, "reduce": REDUCE_TYPES}

WARP_SIZE = {"nvshmem": 32, "rocshmem": 64}

# The world team's handle where a vendor function needs one that unishmem's signature leaves out (mc_ptr):
# NVSHMEM_TEAM_WORLD (device_host/nvshmem_common.cuh).
WORLD_TEAM = {"nvshmem": 0}

# What `team.handle` is in a kernel: NVSHMEM's nvshmem_team_t (int32); on rocSHMEM the address of
# unishmem's team descriptor in the symmetric heap (NOTE [team descriptor]), as int64.
TEAM_TYPE = {"nvshmem": tl.int32, "rocshmem": tl.int64}
# Why a compile-time constant cannot be a team handle on a vendor (None: it can, NVSHMEM's predefined teams
# are small integers, and Triton specialises an int argument equal to 1 into a constant).
TEAM_CONSTANT_REFUSED = {
    "nvshmem": None,
    "rocshmem": "a team handle there is the address of its descriptor in the symmetric heap, known at run time",
}

# How a kernel reads its thread id: PTX inline assembly on CUDA; on HIP the work-item id from the
# OpenCL kernel library that Triton links for AMD targets.
THREAD_ID = {"nvshmem": ("asm", "mov.u32 $0, %tid.x;"), "rocshmem": ("extern", "__ockl_get_local_id")}

# consume_token's identity: an empty inline asm whose output is tied to `x` ("0") and which also
# takes the token, so the compiler cannot compute the result before the token exists.
CONSUME_TOKEN_CONSTRAINTS = {"nvshmem": "=l,0,l", "rocshmem": "=v,0,v"}
# A token made after a wait that returns nothing: an inline asm with side effects (never moved above the
# call) whose output is its input.
TOKEN_CONSTRAINTS = {"nvshmem": "=l,0", "rocshmem": "=v,0"}
