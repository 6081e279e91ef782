"""What differs between the Triton releases unishmem supports, in one place (NOTE [Triton releases]).

NOTE [Triton releases]: unishmem runs on Triton 3.6 to 3.9 (docs/nvidia.md#support-matrix); torch 2.11's
CUDA wheels pin 3.6.0. The releases differ in what this module holds, and nowhere else:
- the LLVM each is built with, which decides the newest bitcode it reads (NOTE [bitcode producer] in
  vendor_libs.py): Triton 3.6 (LLVM 22.0) cannot read NVSHMEM 3.8's bitcode (LLVM 22.1);
- 3.6's interpreter converts a scalar to an index with int() of a one-element array, which numpy 2.4
  refuses ("only 0-dimensional arrays can be converted to Python scalars": `range(1, n)` over a kernel
  argument); later releases squeeze the array first, as `index_patch` does;
- 3.6's LLVM aborts the process ("cannot evaluate equated symbol 'kernel.num_named_barrier'") when it
  assembles an AMD code object that calls a function nothing defines, as a rocSHMEM call is where its
  bitcode is not installed; with the callee defined it assembles. Where that is so, a HIP compile without
  rocSHMEM's bitcode stops at LLVM IR (`compile_asm`), the last stage that needs no rocSHMEM;
- 3.6's to 3.8's LLVM fail an assertion compiling NVSHMEM's half and bfloat16 `p` (language/_vendor.py's
  P_AS_BITS sends their bits instead, on every release);
- 3.6's to 3.8's AMD backend drops `volatile` from tl.load (a plain LLVM load, which may be hoisted or served
  from a cache: a spin on it may never end) unless the load is also `.cv`; their NVIDIA backend drops `.cv`
  beside `volatile` (3.6, 3.7) or hands ptxas `ld.volatile.cv`, which it refuses (3.8, 3.9). So a volatile
  load takes `volatile_cache_modifier` of its target (checked for each release's PTX and gfx942 IR);
- 3.6's to 3.8's pipeliner cannot schedule a loop (num_stages > 1) whose loads depend on a device wait
  through consume_token ("pipeliner doesn't know how to predicate this op": the compile fails, nothing runs
  wrong); 3.9 pipelines it. There, such a loop takes `tl.range(..., num_stages=1)`.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import re
from pathlib import Path

from .errors import BackendUnavailable
from .vendor_libs import triton_provider

SUPPORTED = ((3, 6), (3, 9))  # the oldest and newest minor releases of the matrix
_RANGE = f"{SUPPORTED[0][0]}.{SUPPORTED[0][1]} to {SUPPORTED[1][0]}.{SUPPORTED[1][1]}"

try:
    import triton
except ImportError as e:
    raise ImportError(
        f"unishmem's device library and kernels need Triton ({_RANGE}), and it does not import here: {e}. "
        "torch's CUDA and ROCm wheels bring their own; beside torch's CPU wheel, `pip install 'unishmem[triton]'`"
    ) from e


def release(text: str) -> tuple[int, int] | None:
    """'3.6.0+git9a3c' -> (3, 6); None where the text names no release."""
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def version() -> tuple[int, int]:
    v = release(triton.__version__)
    assert v is not None  # importing this module refuses a Triton that names no release
    return v


def in_matrix() -> bool:
    return SUPPORTED[0] <= version() <= SUPPORTED[1]


# Checked at import, before anything uses Triton: on another release the device library would fail in
# ways that do not name the cause (NOTE [Triton releases]; NOTE [Triton distributions] in vendor_libs.py).
if release(getattr(triton, "__version__", "")) is None or not in_matrix():
    raise ImportError(
        f"unishmem supports Triton {_RANGE}; the Triton here is {getattr(triton, '__version__', 'of no version')} "
        f"({triton.__file__}, installed by {triton_provider(triton.__file__)}): install the torch that brings a "
        "Triton in that range, or beside torch's CPU wheel `pip install 'triton>=3.6,<3.10'` "
        "(docs/nvidia.md#support-matrix)"
    )


@functools.cache
def llvm_producer() -> str | None:
    """The LLVM release Triton is built with, as that LLVM names itself in the bitcode it writes
    ('LLVM22.0.0git'); None where its library does not say. Read once (a scan of about 0.5 s)."""
    path = Path(triton.__file__).parent / "_C" / "libtriton.so"
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            m = re.search(rb"\x00(LLVM\d+\.\d+\.\d+(?:git)?)\x00", data)
            return m.group(1).decode() if m else None  # while the mapping is open
    except (OSError, ValueError):
        return None


@functools.cache
def check_readable(bitcode: Path) -> None:
    """BackendUnavailable, with the remedy, where this Triton's LLVM cannot read `bitcode` (NOTE [bitcode
    producer]); silent where either release is unknown (Triton's own error then says it)."""
    from .vendor_libs import bitcode_producer, llvm_release

    writer, reader = bitcode_producer(bitcode), llvm_producer()
    wrote, reads = llvm_release(writer), llvm_release(reader)
    if wrote is None or reads is None or wrote <= reads:
        return
    raise BackendUnavailable(
        f"{bitcode} was written by {writer}, and Triton {triton.__version__} is built with {reader}, which "
        "cannot read bitcode of a newer LLVM: install a vendor library whose bitcode is not newer (Triton 3.6 "
        "reads NVSHMEM up to 3.7; torch 2.11 pins nvidia-nvshmem-cu13==3.4.5) or a newer Triton "
        "(docs/nvidia.md#support-matrix)"
    )


def patch_interpreter() -> None:
    """Triton 3.6's interpreter: a scalar's __index__ as later releases have it (squeeze, then int)."""
    if version() >= (3, 7):
        return
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_unishmem_index", False):
        return

    def index(self):
        return int(self.handle.data.squeeze())

    class IndexFixed:
        """The patch scope, installing our __index__ in place of 3.6's: never theirs, even for a moment
        (other programs of the launch run while a program's patch is applied)."""

        def __init__(self, scope):
            self.scope = scope

        def set_attr(self, obj, name, value):
            self.scope.set_attr(obj, name, index if name == "__index__" else value)

        def __getattr__(self, name):
            return getattr(self.scope, name)

    def patch_lang_tensor(tensor, scope):
        original(tensor, IndexFixed(scope))

    patch_lang_tensor._unishmem_index = True  # type: ignore[attr-defined]  # a mark on the function, read above
    interpreter._patch_lang_tensor = patch_lang_tensor


def volatile_cache_modifier(amd: bool) -> str:
    """The cache modifier of a volatile tl.load for an AMD or an NVIDIA target (NOTE [Triton releases])."""
    return ".cv" if amd and version() < (3, 9) else ""


def assembles_undefined_calls(backend: str) -> bool:
    """Whether this Triton assembles a code object for `backend` that calls a function nothing defines."""
    return backend != "hip" or version() >= (3, 7)


def compile_asm(src, target, options: dict, linked: bool) -> tuple[dict, bool]:
    """(triton.compile(src, target, options).asm, True); where this Triton cannot assemble the calls that
    are left undefined (`linked` False: the vendor's bitcode is not here), the text of each stage up to LLVM
    IR and False."""
    if linked or assembles_undefined_calls(target.backend):
        return triton.compile(src, target=target, options=options).asm, True
    try:
        with _lowering_only():
            triton.compile(src, target=target, options=options)
    except _LoweredOnly as e:
        return e.asm, False
    raise AssertionError("a compile that stops after LLVM IR returned")  # every backend has a stage after it


def front_end(src, target) -> str:
    """The Triton IR of `src` for `target` (a GPUTarget): code generation, where the device library checks
    its arguments, and the TTIR passes; nothing target-specific after them, so no vendor bitcode is needed."""
    try:
        with _lowering_only("ttir"):
            triton.compile(src, target=target, options={})
    except _LoweredOnly as e:
        return e.asm["ttir"]
    raise AssertionError("a compile that stops after TTIR returned")  # every backend has a stage after it


class _LoweredOnly(Exception):
    """Raised by `_lowering_only` in place of the stages after its last one: `asm` has the text of each stage
    up to it ("ttir", "ttgir", "llir"), as a compiled kernel's asm has them."""

    def __init__(self, asm: dict[str, str]):
        super().__init__("lowered; not assembled")
        self.asm = asm


@contextlib.contextmanager
def _lowering_only(last: str = "llir"):
    """triton.compile stops after stage `last` and raises _LoweredOnly (Triton's stage hook, which every
    supported release has). For one compile in a worker process: the hook is Triton's one global."""
    from triton import knobs

    def stop_after(*args):
        if not args:  # Triton >= 3.7 also asks the hook for a cache key: (key, hash)
            return f"unishmem-lowering-to-{last}", f"unishmem-lowering-to-{last}"
        if previous is not None:
            previous(*args)
        stages = args[1]  # args: (backend, stages, options, language, capability)
        asm: dict[str, str] = {}
        names = list(stages)
        end = names.index(last)
        for name in names[: end + 1]:
            stages[name] = _recorded(stages[name], name, asm)
        for name in names[end + 1 :]:
            stages[name] = functools.partial(_raise_lowered, asm)

    previous = knobs.runtime.add_stages_inspection_hook
    knobs.runtime.add_stages_inspection_hook = stop_after
    try:
        yield
    finally:
        knobs.runtime.add_stages_inspection_hook = previous


def _recorded(stage, name: str, asm: dict):
    def run(src, metadata):
        out = stage(src, metadata)
        asm[name] = str(out)
        return out

    return run


def _raise_lowered(asm, src, metadata):
    raise _LoweredOnly(asm)


def launch_cache_key(jit_function, target, args: tuple, kwargs: dict) -> str:
    """The key under which `jit_function.run(*args, **kwargs)` finds its compiled kernel for `target`
    (a GPUTarget): a new key is a new compile. Computed as JITFunction.run computes it (its binder and
    compute_cache_key, the same in 3.6 to 3.9) without a GPU, under the interpreter too: for counting a
    kernel's compiled variants."""
    from triton.runtime.jit import compute_cache_key

    _, specialization, options = _binder(jit_function, target)(*args, **kwargs)
    return compute_cache_key({}, specialization, options)


@functools.cache
def _binder(jit_function, target):
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    if not isinstance(jit_function, JITFunction):  # TRITON_INTERPRET=1: the same function, as compiled
        jit_function = JITFunction(jit_function.fn, **jit_function.kwargs)
    return create_function_from_signature(jit_function.signature, jit_function.params, make_backend(target))
