"""Command line: `unishmem run | info`."""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import sys


def _info() -> int:
    import torch

    from . import __version__
    from .backends import NAMES

    print(f"unishmem {__version__} (python {platform.python_version()}, torch {torch.__version__})")
    print("backends:")
    for name in NAMES:
        try:
            mod = importlib.import_module(f"unishmem._{name}")
            print(f"  {name:9s} built   {mod.__file__}")
        except ImportError as e:
            print(f"  {name:9s} not built ({e})")
    _vendor_info()
    shm = shutil.disk_usage("/dev/shm") if os.path.isdir("/dev/shm") else None
    if shm:
        print(f"host shared memory: /dev/shm, {shm.free / 2**30:.1f} GiB free of {shm.total / 2**30:.1f} GiB")
    print("devices:")
    print(f"  cpu: {os.cpu_count()} cores")
    if torch.cuda.is_available():
        kind = "ROCm" if torch.version.hip else "CUDA"
        for i in range(torch.cuda.device_count()):
            print(f"  {kind} {i}: {torch.cuda.get_device_name(i)}")
    else:
        print("  no CUDA or ROCm device visible to torch")
    return 0


def _vendor_info() -> None:
    """Vendor libraries and device bitcode found, and whether the bitcode matches the host library."""
    from . import vendor_libs

    nv = vendor_libs.find_nvshmem()
    print("NVSHMEM:")
    if nv.library:
        print(f"  library  {nv.library} ({nv.origin}), version {nv.version or 'unknown'}")
    for arch, bc in sorted(nv.bitcode.items(), key=lambda kv: int(kv[0][3:])):
        ok, why = vendor_libs.check_bitcode(nv, bc)
        print(f"  bitcode  {arch:7s} {bc}  [{'ok' if ok else 'MISMATCH'}: {why}]")
    for p in nv.problems:
        print(f"  problem  {p}")
    roc = vendor_libs.find_rocshmem()
    print("rocSHMEM:")
    print(f"  prefix   {roc.prefix} ({roc.origin})")
    for arch, bc in sorted(roc.bitcode.items()):
        print(f"  bitcode  {arch:7s} {bc}")
    for p in roc.problems:
        print(f"  problem  {p}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unishmem", description="GPU symmetric memory for Python and Triton")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a program as N PEs on this host")
    run.add_argument("-n", "--npes", "-np", type=int, required=True, help="number of PEs")
    run.add_argument("program", nargs=argparse.REMAINDER, help="prog.py [args], -m module [args], or a command")
    sub.add_parser("info", help="backends built, libraries found, devices")
    args = parser.parse_args(argv)
    if args.command == "info":
        return _info()
    if not args.program:
        parser.error("run: give the program to run, e.g. `unishmem run -n 4 prog.py`")
    from .launcher import run as run_job

    return run_job(args.npes, args.program)


if __name__ == "__main__":
    sys.exit(main())
