"""NOTE [direct launch] (unishmem/triton_support.py): a plan's warm call launches the kernel Triton compiled
for its variant itself; any other call takes Triton's whole path.

No GPU runs here. The branch a GPU takes is driven with Triton's driver and the compiled kernel stood in:
what the direct launch hands the launcher is checked against Triton's own binder, and which compiled
kernel serves a call against Triton's own cache key. The kernels' results through their plans are
checked under the interpreter, at 1, 2 and 4 PEs."""

import contextlib

import pytest
import torch
import triton
import triton.language as tl
from spmd import spmd
from triton.backends.compiler import GPUTarget

import unishmem
from unishmem import _triton_compat, triton_support
from unishmem.triton_support import PER_CALL

SM_90 = GPUTarget("cuda", 90, 32)


@unishmem.jit
def _scaled_copy(x, out, n, stage, SCALE: tl.constexpr, BLOCK: tl.constexpr = 64):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) * SCALE + stage, mask=offs < n)


class _Driver:
    """Triton's active driver, as far as a launch asks it."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return 7


class _Compiled:
    """What Triton's whole path returns (a CompiledKernel), recording the launches made with it."""

    function, packed_metadata = 1234, ("packed",)

    def __init__(self, key):
        self.key = key  # Triton's cache key of the call that compiled it
        self.launches = []

    def run(self, *launch):
        self.launches.append(launch)

    def launch_metadata(self, grid, stream, *args):
        return ("metadata", grid, stream)


@pytest.fixture
def gpu_branch(monkeypatch):
    """The whole path's calls, in a runtime where kernels launch compiled, with Triton's driver and its
    compile stood in."""
    whole = []

    def compile_and_launch(*args, grid, **kwargs):
        whole.append(_Compiled(_triton_compat.launch_cache_key(_scaled_copy.jit_function, SM_90, args, kwargs)))
        return whole[-1]

    monkeypatch.setattr(triton_support, "interpreting", lambda: False)
    monkeypatch.setattr(triton.runtime.driver, "_active", _Driver())
    monkeypatch.setattr(_scaled_copy, "run", compile_and_launch)
    with unishmem.init(backend="host", heap_size="1M"):
        yield whole


def test_a_variant_compiles_once_and_its_kernel_is_the_one_triton_would_pick(gpu_branch):
    base, sink = torch.zeros(300), torch.zeros(300)
    bound = _scaled_copy.bind((4,), PER_CALL, PER_CALL, 256, PER_CALL, SCALE=2)
    calls = [  # x, out, stage: 16-byte aligned or not, stage 1 (a value Triton specialises) or not
        (base[:256], sink[:256], 0),
        (base[:256], sink[:256], 0),
        (base[1:257], sink[:256], 0),
        (base[:256], sink[4:260], 0),  # 16 bytes on: aligned still
        (base[:256], sink[:256], 1),
        (base[1:257], sink[3:259], 1),
        (base[1:257], sink[3:259], 1),
        (base[4:260], sink[:256], 2),
    ]
    served = []
    for x, out, stage in calls:
        before = [len(c.launches) for c in gpu_branch]
        compiled_now = len(gpu_branch)
        bound(x, out, stage)
        if len(gpu_branch) > compiled_now:
            served.append(gpu_branch[-1])  # the whole path
        else:
            (launched,) = [c for c, b in zip(gpu_branch, before) if len(c.launches) > b]
            served.append(launched)
    # every call ran the kernel Triton's own cache would have found for it
    for (x, out, stage), compiled in zip(calls, served):
        args = (x, out, 256, stage)
        assert compiled.key == _triton_compat.launch_cache_key(_scaled_copy.jit_function, SM_90, args, {"SCALE": 2})
    # and a variant's second call launched directly: x and out's alignment and stage make 5 variants
    assert len(gpu_branch) == 5
    assert [served.index(c) for c in served] == [0, 0, 2, 0, 4, 5, 5, 7]


def test_the_direct_launch_passes_what_tritons_launch_would(gpu_branch):
    x, out = torch.arange(100.0), torch.zeros(100)
    bound = _scaled_copy.bind((2,), x, PER_CALL, 100, 0, SCALE=PER_CALL)
    bound(out, 3)  # the whole path
    bound(out, 3)  # direct
    (compiled,) = gpu_branch
    (launch,) = compiled.launches
    dims, (stream, function, packed, metadata, enter, leave), arguments = launch[:3], launch[3:9], list(launch[9:])
    assert (dims, stream, function, packed) == ((2, 1, 1), 7, 1234, ("packed",))
    # Triton's launcher hands the metadata to the launch hooks alone: with none registered, none is made
    assert (metadata, enter, leave) == (
        None,
        triton.knobs.runtime.launch_enter_hook,
        triton.knobs.runtime.launch_exit_hook,
    )
    hooks = triton.knobs.runtime.launch_enter_hook  # a HookChain in Triton 3.6 to 3.9
    hook = lambda metadata: None  # noqa: E731
    hooks.add(hook)  # as a profiler registers itself
    try:
        bound(out, 3)
    finally:
        hooks.remove(hook)
    assert compiled.launches[-1][6] == ("metadata", (2,), 7)  # what compiled.launch_metadata made
    # Triton's binder gives the parameters JITFunction.run hands its launcher (defaults filled in)
    binder = _triton_compat._binder(_scaled_copy.jit_function, SM_90)
    expected, _, _ = binder(x, out, 100, 0, SCALE=3)
    addresses = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in expected.values()]
    assert arguments == addresses


def test_under_the_interpreter_every_call_takes_the_whole_path():
    x, out = torch.arange(64.0), torch.zeros(64)
    with unishmem.init(backend="host", heap_size="1M"):
        bound = _scaled_copy.bind((1,), PER_CALL, PER_CALL, 64, 1, SCALE=2)
        for _ in range(2):
            out.zero_()
            bound(x, out)
            assert torch.equal(out, x * 2 + 1)
        assert bound.compiled == {}


def test_while_a_capture_records_a_known_variant_takes_the_whole_path(gpu_branch):
    from unishmem import testing

    x, out = torch.arange(64.0), torch.zeros(64)
    bound = _scaled_copy.bind((1,), PER_CALL, PER_CALL, 64, 1, SCALE=2)
    bound(x, out)
    bound(x, out)
    assert (len(gpu_branch), len(gpu_branch[0].launches)) == (1, 1)
    with testing.capture(dry=True):
        bound(x, out)
    assert (len(gpu_branch), len(gpu_branch[0].launches)) == (2, 1)  # (the stand-in whole path records none)


OUT_NUMEL = {  # a collective's output elements for an x of `numel` elements at n PEs
    "all_gather": lambda numel, n: n * numel,
    "all_to_all": lambda numel, n: numel,
    "reduce_scatter": lambda numel, n: numel // n,
    "all_reduce": lambda numel, n: numel,
}


def _reference(name, xs, n, me):
    if name == "all_gather":
        return torch.cat(xs)
    if name == "all_to_all":
        return torch.cat([x.chunk(n)[me] for x in xs])
    total = torch.stack(xs).sum(0)
    return total.chunk(n)[me] if name == "reduce_scatter" else total


@spmd(sizes=(1, 2, 4))
def test_warm_calls_through_their_plans_match_torch_after_a_shape_dtype_or_alignment_change(rt):
    import unishmem.kernels as K
    from unishmem import testing

    n, me = rt.n_pes, rt.my_pe
    # (dtype, elements, x's offset, out's offset): a call's first shape, then changes the plan must notice
    cases = [
        (torch.float32, 16 * n, 0, 0),
        (torch.float32, 16 * n, 1, 0),  # x 4 bytes off: not symmetric, copied in
        (torch.float32, 16 * n, 0, 3),  # out 12 bytes off
        (torch.bfloat16, 16 * n, 0, 0),
        (torch.float32, 40 * n, 0, 0),
        (torch.float32, 40 * n, 2, 1),
    ]
    for dtype, numel, x_off, out_off in cases:
        xs = [(torch.arange(numel, dtype=torch.float32) % 13 + pe).to(dtype) for pe in range(n)]
        source = torch.zeros(numel + x_off, dtype=dtype)
        x = source[x_off:]
        x.copy_(xs[me])
        for name, out_numel in OUT_NUMEL.items():
            sink = torch.full((out_numel(numel, n) + out_off,), -1.0, dtype=dtype)
            out = sink[out_off:]
            getattr(K, name)(x, out=out)  # outside a capture a host-backend call checks all, and plans
            assert torch.equal(out, _reference(name, xs, n, me)), (name, dtype, numel, x_off, out_off)
            out.fill_(-1)
            with testing.capture(dry=False):  # where a warm call takes its plan (checks once per shape)
                getattr(K, name)(x, out=out)
            assert torch.equal(out, _reference(name, xs, n, me)), (name, dtype, numel, x_off, out_off)


@spmd(sizes=(1, 2, 4))
def test_warm_gemm_calls_read_the_operands_they_are_given(rt):
    """The GEMMs' plans fix the shapes, not the operands: a warm call with another b (or a) reads it."""
    import unishmem.kernels as K
    from unishmem import testing

    n, me = rt.n_pes, rt.my_pe
    for dtype, m, k, cols in ((torch.float32, 16, 32, 24), (torch.float16, 8, 16, 16), (torch.float32, 40, 32, 24)):
        shards = [(torch.arange(m * k) % 7 + pe).reshape(m, k).to(dtype) for pe in range(n)]
        bs = [(torch.arange(k * cols) % 5 + j).reshape(k, cols).to(dtype) for j in range(2)]
        a_full = torch.cat(shards).float()
        for j in range(2):  # j=0: the first call outside a capture (it plans), j=1: a warm one
            with testing.capture(dry=False) if j else contextlib.nullcontext():
                c = K.ag_gemm(shards[me], bs[j])
            assert torch.allclose(c.float(), a_full @ bs[j].float(), rtol=1e-2, atol=1e-2), (dtype, m, j)
        # gemm_rs: every PE's a [n*m, k] against its b_shard [k, cols]; rows block `me` of the sum
        a_parts = [(torch.arange(n * m * k) % 3 + pe).reshape(n * m, k).to(dtype) for pe in range(n)]
        for j in range(2):
            b_parts = [(bs[j] + pe).to(dtype) for pe in range(n)]
            with testing.capture(dry=False) if j else contextlib.nullcontext():
                c = K.gemm_rs(a_parts[me], b_parts[me])
            total = sum(a.float() @ b.float() for a, b in zip(a_parts, b_parts))
            assert torch.allclose(c.float(), total.chunk(n)[me], rtol=1e-2, atol=1e-1), (dtype, m, j)


@spmd(sizes=(1, 2, 4))
def test_a_warm_combine_follows_the_routing_of_the_handle_it_is_given(rt):
    """combine's plan fixes the shapes and the workspace, not the routing: each call's handle is read."""
    import unishmem.kernels as K
    from unishmem import testing

    n, me = rt.n_pes, rt.my_pe
    T, H, k, experts = 6, 32, 2, 2 * n
    tokens = (torch.arange(T * H, dtype=torch.float32).reshape(T, H) % 11 + me) / 4
    for call, dtype in enumerate((torch.float32, torch.float32, torch.bfloat16)):
        ids = (torch.arange(T * k).reshape(T, k) * (call + 1) + me) % experts
        weights = torch.rand(T, k, generator=torch.Generator().manual_seed(call))
        x = tokens.to(dtype)
        with testing.capture(dry=False) if call == 1 else contextlib.nullcontext():
            rows, _, handle = K.dispatch(x, ids, weights, experts, max_tokens=T)
            out = K.combine(rows * 2, handle)  # each expert doubles its rows
        expected = (weights[:, :, None] * 2 * x.float()[:, None, :]).sum(1)
        assert torch.allclose(out.float(), expected, rtol=2e-2, atol=2e-2), (call, dtype)
