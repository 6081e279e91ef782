"""Signal ping-pong between pairs of PEs:  unishmem run -n 4 examples/ping_pong.py

PEs 2k and 2k+1 bounce a ball: each hit puts the ball's value with putmem_signal and waits for
the reply's signal. On a machine without a GPU the kernel runs under Triton's interpreter on the
host backend (slow per round: the point there is correctness, not speed).
"""

import os
import sys
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton.language as tl  # noqa: E402

import unishmem  # noqa: E402
import unishmem.language as shl  # noqa: E402


@unishmem.jit
def ping_pong(ball, sig, ROUNDS: tl.constexpr):
    me = shl.my_pe()
    partner = me ^ 1
    serves = me % 2 == 0
    for r in range(1, ROUNDS + 1):
        if serves:
            tl.store(ball + 1, r)  # the value we hit back, staged in our own copy
            shl.putmem_signal(ball, ball + 1, 8, sig, r, shl.SIGNAL_SET, partner)
            shl.signal_wait_until(sig, shl.CMP_EQ, r)
        else:
            shl.signal_wait_until(sig, shl.CMP_EQ, r)
            tl.store(ball + 1, tl.load(ball) * 10)
            shl.putmem_signal(ball, ball + 1, 8, sig, r, shl.SIGNAL_SET, partner)


# For `unishmem compile examples/ping_pong.py` (no GPU needed): argument types and constants as main() launches.
COMPILE = {ping_pong: {"signature": {"ball": "*i64", "sig": "*u64"}, "constexprs": {"ROUNDS": 20}}}


def main() -> None:
    rounds = 20
    with unishmem.init(heap_size="16M") as rt:
        if rt.n_pes % 2:
            raise SystemExit(f"ping_pong needs an even number of PEs, not {rt.n_pes}")
        ball = rt.zeros(2, dtype=torch.int64)
        sig = rt.signals(1)
        start = time.perf_counter()
        ping_pong[(1,)](ball, sig, ROUNDS=rounds)
        elapsed = time.perf_counter() - start
        expected = rounds * 10 if rt.my_pe % 2 == 0 else rounds  # servers got the last reply
        assert ball[0].item() == expected, ball
        rt.barrier_all()
        if rt.my_pe == 0:
            sys.stdout.write(
                f"{rounds} round trips between {rt.n_pes // 2} pair(s): "
                f"{elapsed / rounds * 1e6:.0f} us each (backend {rt.backend})\n"
            )
        rt.free(ball)
        rt.free(sig)


if __name__ == "__main__":
    main()
