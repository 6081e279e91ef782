"""Runs every call of the agreement test under TRITON_INTERPRET=1 on the host backend, one PE:
agreement_interpreted.py KERNELS_MODULE OUT_JSON writes {kernel name: null, or "Type: message"}."""

import json
import os
import sys

import torch

import unishmem

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import agreement_cases  # noqa: E402

kernels = agreement_cases.load(sys.argv[1])
rt = unishmem.init(heap_size="16M")
buffers = {name: rt.zeros(n, dtype=getattr(torch, dtype)) for name, (n, dtype) in agreement_cases.BUFFERS.items()}
args = [*buffers.values(), rt.team_world.handle, agreement_cases.RUN_TIME_VALUE]
outcomes = {}
for i in range(len(agreement_cases.cases())):
    try:
        getattr(kernels, f"k{i}")[(1,)](*args)
        outcomes[f"k{i}"] = None
    except Exception as e:  # the outcome is what the test compares
        outcomes[f"k{i}"] = f"{type(e).__name__}: {e}"
with open(sys.argv[2], "w") as f:
    json.dump(outcomes, f)
for t in buffers.values():
    rt.free(t)
rt.finalize()
