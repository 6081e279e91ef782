"""The debug wait table's layout (NOTE [debug waits] in language/_debug.py): what kernels compiled with
debug waits write and the hang report reads. A leaf: the device library and hang.py both import it."""

import zlib

from .enums import WAIT

GLOBAL = "unishmem_wait_table"  # the module global that holds the table's address
SLOTS, SLOT_WORDS, PEERS, PEER_WORDS = 1024, 8, 128, 4
STATE, ADDR, VALUE, INFO, SITE, PID, ROW, NELEMS = range(SLOT_WORDS)  # a wait slot's words
COUNT, S_ADDR, S_VALUE, S_OP = range(PEER_WORDS)  # a signal record's words
TABLE_WORDS = SLOTS * SLOT_WORDS + PEERS * PEER_WORDS
SIGNAL_RECORDS = SLOTS * SLOT_WORDS  # first word of the signal records
# A slot's STATE: 0 free, else the device function's kind of wait
WAIT_KINDS = {
    "signal_wait_until": WAIT.SIGNAL,
    "wait_until": WAIT.VALUE,
    **{f"wait_until_{k}{v}": WAIT.ANY for k in ("all", "any", "some") for v in ("", "_vector")},
    **{n: WAIT.BARRIER for n in ("barrier_all", "sync_all", "barrier_all_block", "sync_all_block", "barrier", "sync")},
}
# The device functions whose signals the table records
SIGNALS = {
    "signal_op",
    *(f"{b}{n}{s}" for b in ("putmem_signal", "put_signal") for n in ("", "_nbi") for s in ("", "_block", "_warp")),
}


def site_key(module: str, qualname: str) -> int:
    """A function's key in a slot's SITE word (its upper 32 bits; the source line is the lower)."""
    return zlib.crc32(f"{module}.{qualname}".encode())
