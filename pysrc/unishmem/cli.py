"""Command line: `unishmem run | info | doctor | settings | bench | compile`."""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import re
import shutil
import sys


def _info() -> int:
    import torch

    from . import __version__, _devices
    from .backends import BACKENDS, device_kind

    print(f"unishmem {__version__} (python {platform.python_version()}, torch {torch.__version__})")
    print("backends:")
    for name, backend in BACKENDS.items():
        try:
            mod = importlib.import_module(backend.module)
            print(f"  {name:9s} built   {mod.__file__}")
        except ImportError as e:
            print(f"  {name:9s} not built ({e})")
    _vendor_info()
    print("support matrix (docs/nvidia.md#support-matrix):")
    _matrix()
    shm = shutil.disk_usage("/dev/shm") if os.path.isdir("/dev/shm") else None
    if shm:
        print(f"host shared memory: /dev/shm, {shm.free / 2**30:.1f} GiB free of {shm.total / 2**30:.1f} GiB")
    print("devices:")
    print(f"  cpu: {os.cpu_count()} cores")
    if torch.cuda.is_available():
        kind = device_kind()
        for i in range(torch.cuda.device_count()):
            print(f"  {kind} {i}: {torch.cuda.get_device_name(i)}")
    else:
        print("  no CUDA or ROCm device visible to torch")
    for title, lines in (_devices.nvidia(), _devices.amd()):
        print(title)
        for line in lines:
            print(f"  {line}")
    return 0


def _vendor_info() -> None:
    """Vendor libraries and device bitcode found, and whether the bitcode matches the host library."""
    from . import vendor_libs

    nv = vendor_libs.find_nvshmem()
    print("NVSHMEM:")
    if nv.library:
        print(f"  library  {nv.library} ({nv.origin}), version {nv.version or 'unknown'}")
    for arch, bc in sorted(nv.bitcode.items()):
        ok, why = vendor_libs.check_bitcode(nv, bc)
        print(f"  bitcode  {arch:7s} {bc}  [{'ok' if ok else 'MISMATCH'}: {why}]")
        print(f"           written by {vendor_libs.bitcode_producer(bc) or 'an unknown LLVM'}; {_readable(bc)}")
    if nv.include:
        print(f"  headers  {nv.include}")
    for p in nv.problems:
        print(f"  problem  {p}")
    roc = vendor_libs.find_rocshmem()
    print("rocSHMEM:")
    print(f"  prefix   {roc.prefix} ({roc.origin})")
    version = vendor_libs.rocshmem_header_version(roc.prefix) if roc.prefix else None
    if version:
        print(f"  version  {version} (rocshmem_config.h); what it enables:")
        for line in vendor_libs.rocshmem_features(version):
            print(f"    {line}")
    for arch, bc in sorted(roc.bitcode.items()):
        print(f"  bitcode  {arch:7s} {bc}")
    for p in roc.problems:
        print(f"  problem  {p}")
    from . import backends

    for backend in backends.BACKENDS.values():
        if backend.torch_build:  # the GPU backends
            _library_calls(backend)


def _readable(bitcode) -> str:
    from .errors import BackendUnavailable

    try:
        from . import _triton_compat
    except ImportError as e:
        return f"Triton not importable ({e})"
    try:
        _triton_compat.check_readable(bitcode)
    except BackendUnavailable as e:
        return f"NOT readable: {e}"
    return f"Triton's LLVM ({_triton_compat.llvm_producer() or 'unknown'}) reads it"


def _satisfies(spec: str, version: tuple) -> bool:
    """Whether `version` meets a Requires-Python of comparison clauses (">=3.10,<3.13")."""
    compare = {">=": "__ge__", "<=": "__le__", ">": "__gt__", "<": "__lt__", "==": "__eq__", "!=": "__ne__"}
    for clause in spec.split(","):
        m = re.fullmatch(r"\s*(>=|<=|>|<|==|!=)\s*([\d.]+)\s*", clause)
        if m is None:
            raise ValueError(f"Requires-Python {spec!r}: {clause!r} is not a comparison with a release")
        op, bound = m.groups()
        limit = tuple(int(x) for x in bound.split("."))
        if not getattr(tuple(version[: len(limit)]), compare[op])(limit):
            return False
    return True


def _matrix() -> None:
    """The versions found beside the support matrix (docs/nvidia.md#support-matrix)."""
    import importlib.metadata

    from . import vendor_libs

    def row(name, found, ok, matrix):
        print(f"  {name:8s} {found:28s} {'in' if ok else 'NOT in'} the matrix ({matrix})")

    python = importlib.metadata.metadata("unishmem")["Requires-Python"]
    row("python", platform.python_version(), _satisfies(python, sys.version_info[:3]), python)
    try:
        from . import _triton_compat
    except ImportError as e:
        print(f"  triton   not importable ({e})")
    else:
        lo, hi = (".".join(map(str, v)) for v in _triton_compat.SUPPORTED)
        found = f"{_triton_compat.triton.__version__} ({_triton_compat.llvm_producer() or 'LLVM unknown'})"
        row("triton", found, _triton_compat.in_matrix(), f"{lo} to {hi}")
    nv = vendor_libs.find_nvshmem()
    if nv.version:
        lo, hi = (".".join(map(str, v)) for v in vendor_libs.NVSHMEM_SUPPORTED)
        row("NVSHMEM", nv.version, vendor_libs.nvshmem_in_matrix(nv.version), f"{lo} to {hi}.x")
    else:
        print("  NVSHMEM  not found")


def _library_calls(backend) -> None:
    """Which operations a built GPU module takes from its library, and which it builds from other calls."""
    try:
        module = importlib.import_module(backend.module)
    except ImportError:
        return
    print(f"{module.vendor} module, built against headers {module.header_version}:")
    for call, native in module.library_calls.items():
        print(f"  {'library ' if native else 'emulated'} {call}")


def _pe_list(text: str) -> list[int]:
    """argparse type: '2,4' -> [2, 4]; every count an int from 2 to 64."""
    counts = []
    for part in text.split(","):
        try:
            n = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a comma-separated list of PE counts, such as 2,4"
            ) from None
        if not 2 <= n <= 64:
            raise argparse.ArgumentTypeError(f"PE count {n} in {text!r} is out of range: each must be 2 to 64")
        counts.append(n)
    return counts


def _scale_list(text: str) -> list[int]:
    return [] if text in ("", "none") else _pe_list(text)


def _hang_timeout(text: str) -> float:
    """argparse type: seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _load(text: str) -> int:
    """argparse type: how many busy processes run beside the benchmark's jobs, 0 to 64."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of busy processes from 0 to 64")
    return n


def _size(text: str) -> int:
    from ._config import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _bench(parser: argparse.ArgumentParser, args) -> int:
    import torch

    from . import bench
    from .bench import kernels
    from .bench.plan import Plan

    if args.launch:
        from .bench import launch

        def measure():
            return launch.run(args.json, args.quick)
    elif args.kernels:
        sizes = kernels.sizes_for(args.quick, args.max_size, gpu=torch.cuda.is_available())
        if not sizes:
            parser.error(f"bench --kernels: --max-size {args.max_size} leaves no sizes (they start at 64 KiB)")

        def measure():
            return kernels.run(args.pes or [2, 4], sizes, args.json, args.plot, args.quick)
    else:
        plan = Plan.make(args.quick, args.pes, args.scale_pes, args.max_size)
        if not plan.p2p_sizes or not plan.coll_sizes:
            parser.error(f"bench: --max-size {args.max_size} leaves no sizes to measure (collectives start at 1 KiB)")

        def measure():
            return bench.run(plan, args.json, args.plot, skip=set(args.skip or ()), load=args.load)

    try:
        for path, what in ((args.json, "--json"), (args.plot, "--plot")):
            if path:
                bench.check_output_path(path, what)
        return measure()
    except (ValueError, RuntimeError) as e:
        print(f"unishmem bench: {e}", file=sys.stderr)
        return 2
    except bench.jobs.JobFailed as e:
        print(f"unishmem bench: {e}", file=sys.stderr)
        return 1


def _split_program(argv: list[str]) -> list[str]:
    """`run`'s program starts at the first word after its own options, even when that word looks like an
    option itself (`-m module`, `-c code`): put a `--` there so argparse takes the rest verbatim."""
    if not argv or argv[0] != "run":
        return argv
    i = 1
    while i < len(argv):
        word = argv[i]
        if word in ("-n", "--npes", "-np", "--hang-timeout"):
            i += 2
        elif word.startswith(("--npes=", "--hang-timeout=")) or word in ("-h", "--help"):
            i += 1
        else:
            return argv[:i] + (["--"] if word != "--" else []) + argv[i:]
    return argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unishmem", description="GPU symmetric memory for Python and Triton")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a program as N PEs on this host")
    run.add_argument("-n", "--npes", "-np", type=int, required=True, help="number of PEs")
    run.add_argument(
        "--hang-timeout",
        type=_hang_timeout,
        metavar="S",
        help="report what every PE waits for and fail the job when a kernel launch has not finished "
        "after S seconds (sets UNISHMEM_HANG_TIMEOUT)",
    )
    run.add_argument("program", nargs=argparse.REMAINDER, help="prog.py [args], -m module [args], or a command")
    sub.add_parser("info", help="backends built, libraries found, devices")
    doctor = sub.add_parser(
        "doctor",
        help="whether each backend can run here and, where one cannot, every missing part and how to get it",
        description="For each backend (host, nvshmem, rocshmem): whether it can run on this machine, and every "
        "part that is missing with how to get it. Exit status 1 when the backend asked for (--backend, else "
        "UNISHMEM_BACKEND; auto: the one init() would pick) cannot run.",
    )
    doctor.add_argument("--backend", choices=("auto", "host", "nvshmem", "rocshmem"), help="the backend to judge")
    doctor.add_argument(
        "--arch",
        type=lambda text: [a for a in text.split(",") if a],
        default=[],
        metavar="A,A",
        help="also check device bitcode for these GPU archs (sm_90, gfx942), e.g. where no GPU is visible yet",
    )
    doctor.add_argument("--json", action="store_true", help="print the same findings as JSON")
    sub.add_parser("settings", help="every environment variable unishmem reads or sets, as docs/settings.md (markdown)")
    bench = sub.add_parser(
        "bench",
        help="measure the host backend beside memcpy, raw atomics, Open MPI and gloo",
        description="Measure put/get, signal ping-pong, barrier and collectives on the host "
        "backend, each figure beside its references measured in the same run.",
    )
    bench.add_argument(
        "--quick", action="store_true", help="few sizes and iterations, 2 and 4 PEs (well under a minute)"
    )
    bench.add_argument("--json", metavar="PATH", help="also write every figure and reference as JSON")
    bench.add_argument(
        "--plot",
        metavar="PATH",
        help="also draw bandwidth and latency against size (PNG; needs matplotlib: pip install 'unishmem[bench]')",
    )
    bench.add_argument("--pes", type=_pe_list, metavar="N,N", help="PE counts for every collective (default 2,4)")
    bench.add_argument(
        "--scale-pes",
        type=_scale_list,
        metavar="N,N",
        help="further PE counts for the barrier and reduce (default 8; 'none' for none)",
    )
    bench.add_argument(
        "--max-size",
        type=_size,
        metavar="SIZE",
        help="largest message, e.g. 4M (default 256M for put/get, 64M for collectives)",
    )
    bench.add_argument("--skip", action="append", choices=("mpi", "gloo"), help="leave out a reference")
    bench.add_argument(
        "--load",
        type=_load,
        default=0,
        metavar="N",
        help="run N busy processes beside every job, to measure a machine whose cores are shared",
    )
    bench.add_argument(
        "--kernels",
        action="store_true",
        help="time unishmem.kernels beside torch.distributed doing the same work instead",
    )
    bench.add_argument(
        "--launch",
        action="store_true",
        help="measure the host work of a warm kernel call beside a plain Triton kernel's launch preparation instead",
    )
    comp = sub.add_parser(
        "compile",
        help="compile a module's @unishmem.jit kernels for GPU targets, with no GPU",
        description="Compile every @unishmem.jit kernel of a module for each target, with no GPU, "
        "and report per kernel and target: vendor bitcode linked, vendor symbols left "
        "unresolved, functions the target's vendor lacks. The module declares the "
        'signatures in a table COMPILE = {kernel: {"signature": {"out": '
        '"*fp32", "n": "i32"}, "constexprs": {"BLOCK": 128}, '
        '"options": {...}}} (a list of such dicts for several specialisations). '
        "Exit status 1 when any fails.",
    )
    comp.add_argument("module", metavar="MODULE_OR_FILE", help="a dotted module name or the path of a .py file")
    comp.add_argument(
        "--target",
        metavar="T,T",
        help="comma-separated, from sm_80, sm_90, sm_100, gfx942, gfx950 (default sm_90,gfx942)",
    )
    comp.add_argument("--json", action="store_true", help="print the report as JSON")
    comp.add_argument(
        "--fast",
        action="store_true",
        help="ptxas without optimisation (DISABLE_PTXAS_OPT=1), as the tests compile; not the code a launch builds",
    )
    comp.add_argument("--out", metavar="DIR", help="also write each binary (.cubin, .hsaco) and its LLVM IR there")
    args = parser.parse_args(_split_program(argv if argv is not None else sys.argv[1:]))
    if args.command == "info":
        return _info()
    if args.command == "doctor":
        from . import doctor as doctor_module

        return doctor_module.run(args.backend, args.arch, args.json)
    if args.command == "settings":
        from ._config import markdown

        print(markdown(), end="")
        return 0
    if args.command == "bench":
        return _bench(bench, args)
    if args.command == "compile":
        from .compile import main as compile_main

        return compile_main(args.module, args.target, args.json, args.fast, args.out)
    if not [w for w in args.program if w != "--"]:
        parser.error("run: give the program to run, e.g. `unishmem run -n 4 prog.py`")
    from .launcher import run as run_job

    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    try:
        extra = {} if args.hang_timeout is None else {"UNISHMEM_HANG_TIMEOUT": str(args.hang_timeout)}
        return run_job(args.npes, program, extra)
    except ValueError as e:
        print(f"unishmem run: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
