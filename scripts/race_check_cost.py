"""What the race check (UNISHMEM_RACE_CHECK, docs/finding-races.md) costs: the same kernels timed in a job
without it and in a job with it, on the host backend under the interpreter.

    python scripts/race_check_cost.py [--pes 2] [--reps 5]     # both jobs, then the ratio
    unishmem run -n 2 scripts/race_check_cost.py --job REPS    # one job (what the driver runs)

A job runs every collective of unishmem.kernels (pull, push and copy-engine forms), ag_gemm and gemm_rs
(fused and not) and dispatch+combine once to warm up (the interpreter's first calls rewrite the kernels),
then REPS times, and prints on PE 0 the mean seconds per pass, the shadow's pages in use and the heap
bytes the checker covered (the bytes the kernels' workspaces and inputs span). Interpreter figures: they
measure the checker's cost beside the interpreter's, not a GPU's.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def passes(rt):
    """One pass of every kernel form."""
    import torch

    import unishmem.kernels as K
    from unishmem import _config

    n, me = rt.n_pes, rt.my_pe
    x = torch.arange(4096.0 * n) + me
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    g = torch.Generator().manual_seed(me)
    tokens, ids = torch.randn(32, 64, generator=g), torch.randint(0, 2 * n, (32, 2), generator=g)

    def one():
        for pull, copy in (("1", "0"), ("0", "0"), ("1", "1")):
            with _config.setting("UNISHMEM_PULL", pull), _config.setting("UNISHMEM_COPY_ENGINE", copy):
                for algorithm in ("one_shot", "two_shot"):
                    K.all_reduce(x, algorithm=algorithm)
                K.all_gather(x)
                K.reduce_scatter(x)
                K.all_to_all(x)
        for overlap in (True, False):
            K.ag_gemm(a, b, overlap=overlap)
            K.gemm_rs(a, b, overlap=overlap)
        expert_tokens, _, handle = K.dispatch(tokens, ids, torch.rand(32, 2, generator=g), 2 * n)
        K.combine(expert_tokens, handle)

    return one


def job(reps: int) -> None:
    import unishmem
    from unishmem import _races

    rt = unishmem.init()
    one = passes(rt)
    one()
    rt.barrier_all()
    start = time.perf_counter()
    for _ in range(reps):
        one()
    rt.barrier_all()
    seconds = (time.perf_counter() - start) / reps
    checker = _races.checker()
    shadow = checker.shadow_bytes() if checker is not None else 0
    if rt.my_pe == 0:
        print(json.dumps({"seconds_per_pass": seconds, "shadow_bytes": shadow, "checked": checker is not None}))
    rt.free_workspaces()
    rt.finalize()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pes", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--job", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job is not None:
        return job(args.job)
    results = {}
    for check in ("0", "1"):
        env = {**os.environ, "TRITON_INTERPRET": "1", "UNISHMEM_RACE_CHECK": check}
        command = ["unishmem", "run", "-n", str(args.pes), sys.executable, __file__, "--job", str(args.reps)]
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        results[check] = json.loads(out.strip().splitlines()[-1])
    off, on = results["0"]["seconds_per_pass"], results["1"]["seconds_per_pass"]
    print(f"{args.pes} PEs, mean of {args.reps} passes of every kernel form:")
    print(f"  unchecked {off * 1e3:.0f} ms, checked {on * 1e3:.0f} ms: {on / off:.2f}x")
    print(f"  shadow pages in use at the end: {results['1']['shadow_bytes'] / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
