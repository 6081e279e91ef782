"""The rendezvous as an attacker and a careless user meet it (NOTE [rendezvous trust] in rendezvous.py):
nobody without the job secret reads or writes anything, nothing is unpickled, nothing listens beyond
the address a job needs, planted files are refused, and bad placements fail at once naming the variable."""

import json
import os
import pickle
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import pytest

from unishmem import PeerFailure, UnishmemWarning, bootstrap, rendezvous
from unishmem.rendezvous import Client, RendezvousError, Server

SECRET = b"0123456789abcdef" * 4


def gather_all(address: str, size: int, values, secret=SECRET, init=0) -> list:
    """Each of `size` ranks joins in rank order, then all gather their values at once (threads); returns
    each rank's result or exception. Joining before anyone gathers matters: a refused claim on a rank not
    yet joined fails the gathers waiting for it (NOTE [rendezvous trust]), which is not what these tests
    are about."""
    results: list = [None] * size
    clients: list = [None] * size
    for r in range(size):
        try:
            clients[r] = Client(address, secret, r, size, init, timeout=10)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            results[r] = e

    def rank(r):
        try:
            results[r] = clients[r].gather(1, values[r])
        except Exception as e:  # noqa: BLE001 - the test looks at it
            results[r] = e
        finally:
            clients[r].close()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size) if clients[r] is not None]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


@pytest.fixture
def tcp_server():
    server = Server("tcp:127.0.0.1:0", SECRET, 2, timeout=10)
    yield server
    server.close()


def raw(address: str) -> socket.socket:
    _, (host, port) = rendezvous.parse_address(address)
    return socket.create_connection((host, port), timeout=10)


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def read_frame(s: socket.socket) -> dict:
    return rendezvous._recv(s)


def test_client_without_the_secret_is_refused_and_the_job_goes_on(tcp_server):
    with pytest.raises(RendezvousError, match="does not know the job's secret"):
        Client(tcp_server.address, b"wrong secret", 0, 2, 0, timeout=5)
    assert gather_all(tcp_server.address, 2, ["a", {"bytes": "00ff"}]) == [["a", {"bytes": "00ff"}]] * 2


def test_unauthenticated_connection_reads_nothing_and_injects_nothing(tcp_server, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:  # what a planted pickle would run
        def __reduce__(self):
            return (open, (str(marker), "w"))

    with raw(tcp_server.address) as s:
        greeting = read_frame(s)
        assert set(greeting) == {"protocol", "nonce"}  # nothing of the job before the handshake
        s.sendall(frame(pickle.dumps(Payload())))  # not JSON: dropped
        assert s.recv(100) == b""
    with raw(tcp_server.address) as s:
        read_frame(s)
        hello = {"rank": 0, "size": 2, "pid": 1, "init": 0}
        s.sendall(frame(json.dumps({"hello": hello, "nonce": "00", "proof": "0" * 64}).encode()))
        assert read_frame(s)["error"] == "auth"
    with raw(tcp_server.address) as s:  # a request without any handshake
        read_frame(s)
        s.sendall(frame(json.dumps({"op": "gather", "step": 1, "value": "injected"}).encode()))
        assert read_frame(s)["error"] == "auth"
    with raw(tcp_server.address) as s:  # a length far over the limit is not read
        read_frame(s)
        s.sendall((1 << 30).to_bytes(4, "big"))
        assert s.recv(100) == b""
    assert not marker.exists()
    assert gather_all(tcp_server.address, 2, [1, 2]) == [[1, 2], [1, 2]]  # only the members' own values


def test_messages_after_the_handshake_cannot_be_tampered_with_replayed_or_moved():
    sender_sock, wire = socket.socketpair()
    sender = rendezvous._Sealed(sender_sock, SECRET, "server-nonce", "client-nonce", "client")
    sender.send({"op": "gather", "step": 1, "value": 7})
    sender.send({"op": "gather", "step": 2, "value": 8})
    first, second = rendezvous._recv_frame(wire), rendezvous._recv_frame(wire)

    def receive(*frames, nonce="client-nonce"):
        inject, receiver_sock = socket.socketpair()
        for f in frames:
            inject.sendall(frame(f))
        receiver = rendezvous._Sealed(receiver_sock, SECRET, "server-nonce", nonce, "server")
        try:
            return [receiver.recv() for _ in frames]
        finally:
            inject.close()
            receiver_sock.close()

    assert receive(first, second) == [{"op": "gather", "step": 1, "value": 7}, {"op": "gather", "step": 2, "value": 8}]
    tampered = first.replace(b'"value":7', b'"value":9')
    for frames in ([tampered], [first, first], [second], [first[:-1]]):  # altered, replayed, out of order, cut
        with pytest.raises(ConnectionError, match="failed authentication"):
            receive(*frames)
    with pytest.raises(ConnectionError, match="failed authentication"):  # from another connection
        receive(first, nonce="another connection's nonce")
    sender_sock.close()
    wire.close()


def test_a_server_without_the_secret_is_not_trusted():
    impostor = Server("tcp:127.0.0.1:0", b"another job's secret", 1, timeout=5)
    try:
        with pytest.raises(RendezvousError, match="does not know the job's secret"):
            Client(impostor.address, SECRET, 0, 1, 0, timeout=5)
    finally:
        impostor.close()


def _non_loopback_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET: picks the default route's address, sends nothing
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_tcp_rendezvous_listens_on_its_address_only(tcp_server):
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to try")
    port = rendezvous.parse_address(tcp_server.address)[1][1]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((address, port), timeout=5)


def test_duplicate_rank_and_size_mismatch_fail_every_rank_at_once(tcp_server):
    results = [None, None]
    c = Client(tcp_server.address, SECRET, 0, 2, 0, timeout=10)  # has joined as rank 0

    def first():
        try:
            c.gather(1, "first")
        except Exception as e:  # noqa: BLE001
            results[0] = e

    t = threading.Thread(target=first)
    t.start()
    with pytest.raises(ValueError, match=r"two processes claim rank 0: pid \d+ and pid \d+"):
        Client(tcp_server.address, SECRET, 0, 2, 0, timeout=10)
    t.join(10)
    c.close()
    assert isinstance(results[0], ValueError) and "two processes claim rank 0" in str(results[0])
    other = Server("tcp:127.0.0.1:0", SECRET, 2, timeout=10)
    try:
        with pytest.raises(ValueError, match="disagree on the job size: rank 1 .* was told 3 PEs, the job has 2"):
            Client(other.address, SECRET, 1, 3, 0, timeout=10)
    finally:
        other.close()


def test_gather_names_the_missing_rank_at_its_deadline_and_a_lost_one_at_once():
    server = Server("tcp:127.0.0.1:0", SECRET, 3, timeout=0.5)
    try:
        c = Client(server.address, SECRET, 0, 3, 0, timeout=5)
        with pytest.raises(RendezvousError, match=r"init step 1: no word from rank\(s\) 1, 2 within"):
            c.gather(1, None)
        server.mark_gone(2, "PE 2 (pid 99) exited with status 0")
        with pytest.raises(PeerFailure, match=r"PE 2 \(pid 99\) exited with status 0"):
            c.gather(2, None)
        c.close()
    finally:
        server.close()


@pytest.mark.parametrize("secret", [b"another job's secret", b""], ids=["wrong", "missing"])
def test_a_rank_refused_for_the_secret_fails_rank_0_at_once(secret):
    """A rank given a wrong UNISHMEM_SECRET, or none, is refused at once; the ranks waiting for it hear
    of it at once too, not at the end of the bootstrap timeout."""
    server = Server("tcp:127.0.0.1:0", SECRET, 2, timeout=20)
    try:
        rank0 = Client(server.address, SECRET, 0, 2, 0, timeout=20)
        outcome = []

        def gather():
            start = time.monotonic()
            try:
                rank0.gather(1, "host 0")
            except Exception as e:  # noqa: BLE001 - the test looks at it
                outcome.append((e, time.monotonic() - start))

        waiting = threading.Thread(target=gather)
        waiting.start()
        with pytest.raises(RendezvousError, match="does not know the job's secret"):
            Client(server.address, secret, 1, 2, 0, timeout=20)
        waiting.join(30)
        ((error, after),) = outcome
        assert isinstance(error, RendezvousError), error
        assert re.search(
            r"rank 1 \(pid \d+, from 127\.0\.0\.1\) was refused: it does not know the job's secret", str(error)
        )
        assert after < 5, after
        rank0.close()
    finally:
        server.close()


@pytest.mark.parametrize("how", ["missing", "refused"])
def test_an_unreachable_launcher_rendezvous_fails_at_once(monkeypatch, tmp_path, how):
    """`unishmem run` listens before it hands out the address: a socket that is missing or refuses is gone."""
    _clear_launcher_env(monkeypatch)
    path = tmp_path / "rendezvous.sock"
    if how == "refused":
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(str(path))  # its name stays; nothing listens
    for k, v in dict(
        UNISHMEM_RENDEZVOUS=f"unix:{path}",
        UNISHMEM_SECRET="x",
        UNISHMEM_RANK="1",
        UNISHMEM_WORLD_SIZE="2",
        UNISHMEM_BOOTSTRAP_TIMEOUT="20",
    ).items():
        monkeypatch.setenv(k, v)
    start = time.monotonic()
    with pytest.raises(RendezvousError, match=f"cannot reach the rendezvous at unix:{path}: "):
        bootstrap.discover()
    assert time.monotonic() - start < 5


def joined_by_a_stranger(value):
    """Rank 0 of an unauthenticated two-rank job (a bootstrap) and, as rank 1, a stranger who joined
    first and sends `value` (JSON, as it crosses the wire) in every exchange."""
    server = Server("tcp:127.0.0.1:0", b"", 2, timeout=10)
    stranger = Client(server.address, b"", 1, 2, 0, timeout=10)

    def send():
        for step in range(1, 4):
            try:
                stranger.gather(step, value)
            except (PeerFailure, RendezvousError):
                return

    threading.Thread(target=send, daemon=True).start()
    client = Client(server.address, b"", 0, 2, 0, timeout=10)
    return bootstrap.RendezvousBootstrap(bootstrap.Placement(0, 2, 0, 1, "srun"), 0, client, server)


@pytest.mark.parametrize(
    "mine, theirs, shown",
    [
        ("host-a", {"bytes": "00ff"}, r"b'\\x00\\xff' \(bytes\) in init exchange 1, where every rank sends a str"),
        (1 << 20, None, r"None in init exchange 1, where every rank sends an int"),
        (1 << 20, True, r"True \(bool\) in init exchange 1, where every rank sends an int"),
        (
            [1, 2, 3],
            [1, "2", 3],
            r"\[1, '2', 3\] \(list\) in init exchange 1, where every rank sends a list of 3 \(int, int, int\)",
        ),
        ("host-a", {"bytes": "not hex"}, r"\{'bytes': 'not hex'\} \(dict\), which is not a value"),
        ("host-a", {"code": "import os"}, r"\{'code': 'import os'\} \(dict\), which is not a value"),
    ],
)
def test_every_value_from_a_peer_is_type_checked(mine, theirs, shown):
    boot = joined_by_a_stranger(theirs)
    try:
        with pytest.raises(RendezvousError, match=r"^rank 1 sent " + shown):
            boot.allgather(mine)
    finally:
        boot.close()


def test_a_strangers_bytes_end_the_host_backends_init_with_a_clear_error():
    from unishmem import backends

    boot = joined_by_a_stranger({"bytes": "00ff"})
    try:
        with pytest.raises(RendezvousError, match=r"^rank 1 sent b'\\x00\\xff' \(bytes\) in init exchange 1"):
            backends.open_host(backends.get("host"), boot, 1 << 20, None)
    finally:
        boot.close()


# ---- planted files and directories (one-host rendezvous) ---------------------------------------


@pytest.fixture
def private(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path


def _join_as_rank_1(timeout=2.0):
    placement = bootstrap.Placement(1, 2, 1, 2, "srun")
    return bootstrap._one_host(placement, "a job", 0, timeout)


@pytest.mark.skipif(os.getuid() != 0, reason="planting a file of another uid needs root (chown)")
def test_planted_rendezvous_file_of_another_user_is_refused(private):
    path, _ = bootstrap._rendezvous_file("a job", 0)
    with open(path, "w") as f:
        json.dump({"address": "tcp:127.0.0.1:1", "secret": "x", "pid": os.getpid()}, f)
    os.chmod(path, 0o600)
    os.chown(path, 65534, 65534)
    with pytest.raises(bootstrap.RefusedFile, match=r"belongs to uid 65534, not to this user"):
        _join_as_rank_1()


def test_planted_link_or_readable_file_is_refused(private):
    path, _ = bootstrap._rendezvous_file("a job", 0)
    target = private / "elsewhere.json"
    target.write_text("{}")
    os.symlink(target, path)
    with pytest.raises(bootstrap.RefusedFile, match="is a symbolic link"):
        _join_as_rank_1()
    os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    os.chmod(path, 0o644)
    with pytest.raises(bootstrap.RefusedFile, match="has mode 644"):
        _join_as_rank_1()


def test_private_directory_passes_over_names_it_cannot_trust(private):
    """Whatever holds a name (an open directory, a link, a file; another user's directory where root can
    make one) is passed over with a warning, never used or removed: the next free name is made 0700."""
    uid = os.getuid()
    open_dir = private / f"unishmem-{uid}"
    open_dir.mkdir()
    os.chmod(open_dir, 0o755)
    os.symlink(private, private / f"unishmem-{uid}-1")
    (private / f"unishmem-{uid}-2").write_text("")
    taken = [open_dir, private / f"unishmem-{uid}-1", private / f"unishmem-{uid}-2"]
    if uid == 0:
        theirs = private / f"unishmem-{uid}-3"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        taken.append(theirs)
    with pytest.warns(UnishmemWarning) as said:
        path = rendezvous.private_dir()
    assert path == str(private / f"unishmem-{uid}-{len(taken)}")
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == uid
    messages = [str(w.message) for w in said]
    assert any(f"unishmem-{uid} is open to others (mode 755)" in m for m in messages), messages
    assert any(f"unishmem-{uid}-1 is a symbolic link" in m for m in messages), messages
    assert any(f"unishmem-{uid}-2 is not a directory" in m for m in messages), messages
    assert uid != 0 or any(f"unishmem-{uid}-3 belongs to uid 65534" in m for m in messages), messages
    assert all(os.path.lexists(t) for t in taken)  # nothing of theirs was touched
    with pytest.warns(UnishmemWarning):
        assert rendezvous.private_dir() == path  # and every later call finds the same one


# Run as uid 65534, another local user: it plants, where the victim's job looks first, a directory anyone
# may enter holding a rendezvous file and a listening socket under the job's own names, and a link to it
# at the next name. Told to on its stdin, it says whether anyone connected.
SQUATTER = """
import json, os, socket, sys
base, uid, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
trap = os.path.join(base, f"unishmem-{uid}")
os.mkdir(trap)
os.chmod(trap, 0o777)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(os.path.join(trap, name + ".sock"))
os.chmod(os.path.join(trap, name + ".sock"), 0o777)
listener.listen(16)
with open(os.path.join(trap, name + ".json"), "w") as f:
    json.dump({"address": "unix:" + os.path.join(trap, name + ".sock"), "secret": "x", "pid": os.getpid()}, f)
os.symlink(trap, os.path.join(base, f"unishmem-{uid}-1"))
print("PLANTED", flush=True)
sys.stdin.read()
listener.setblocking(False)
try:
    listener.accept()
    print("CONNECTED", flush=True)
except BlockingIOError:
    print("NOBODY", flush=True)
"""


def _python_for_others() -> str | None:
    """A Python interpreter that another user may run (this one may lie in a directory only we can enter)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        path = os.path.realpath(candidate)
        dirs = [os.path.dirname(path)]
        while dirs[-1] != "/":
            dirs.append(os.path.dirname(dirs[-1]))
        if os.path.isfile(path) and all(os.stat(p).st_mode & 0o001 for p in [path, *dirs]):
            return path
    return None


@pytest.mark.skipif(os.getuid() != 0, reason="running a process as another user (uid 65534) needs root")
def test_names_another_user_took_first_stand_in_no_jobs_way(tmp_path, monkeypatch):
    """Another local user takes, in a shared sticky directory, the names a job looks for first: the job
    runs anyway, in a directory of its own, and never connects to the squatter."""
    python = _python_for_others()
    if python is None:
        pytest.skip("no Python interpreter here that uid 65534 may run")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    name = os.path.basename(bootstrap._rendezvous_file("a job", 0)[0])[: -len(".json")]
    shared = tempfile.mkdtemp(prefix="unishmem-test-shared-", dir="/tmp")
    os.chmod(shared, 0o1777)  # as /tmp is
    squatter = None
    try:
        squatter = subprocess.Popen(
            [python, "-I", "-c", SQUATTER, shared, str(os.getuid()), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            user=65534,
            group=65534,
            extra_groups=[],
        )
        assert squatter.stdout.readline() == "PLANTED\n", squatter.communicate(timeout=30)[1]
        monkeypatch.setenv("XDG_RUNTIME_DIR", shared)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnishmemWarning)  # passing over the names is said
            boots = one_host_job(2, "a job")
            results = allgather_all(boots, ["zero", "one"])
        for b in boots:
            b.close()
        out, err = squatter.communicate("report", timeout=30)
        assert results == [["zero", "one"]] * 2
        assert out == "NOBODY\n", err
        ours = os.path.join(shared, f"unishmem-{os.getuid()}-2")
        assert os.lstat(ours).st_uid == os.getuid() and os.listdir(ours) == []
    finally:
        if squatter is not None and squatter.poll() is None:
            squatter.kill()
            squatter.wait()
        shutil.rmtree(shared)


def in_threads(size: int, fn) -> list:
    """fn(rank) in a thread per rank; returns the results in rank order, or raises the first error."""
    results = [None] * size

    def run(r):
        try:
            results[r] = fn(r)
        except Exception as e:  # noqa: BLE001 - raised below, in the test's thread
            results[r] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in reversed(range(size))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


def one_host_job(size: int, job: str, timeout: float = 10) -> list:
    """The one-host bootstraps of a job of `size` ranks, each found by its own thread (rank 0 serves)."""
    return in_threads(
        size, lambda r: bootstrap._one_host(bootstrap.Placement(r, size, r, size, "srun"), job, 0, timeout)
    )


def allgather_all(boots: list, values: list) -> list:
    return in_threads(len(boots), lambda r: boots[r].allgather(values[r]))


def test_rank_0_serves_and_leaves_no_file(private):
    """The one-host path end to end, in threads: rank 0 serves, rank 1 finds it; once both have joined,
    neither the rendezvous file nor its socket is left, before anyone closes anything (a program that
    fails after init may never close its bootstrap)."""
    boots = one_host_job(2, "a job")
    assert allgather_all(boots, [b"x", b"\x00x"]) == [[b"x", b"\x00x"]] * 2  # bytes survive the JSON encoding
    d = private / f"unishmem-{os.getuid()}"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert list(d.iterdir()) == []
    assert allgather_all(boots, [0, 1]) == [[0, 1]] * 2  # the connections stay
    for b in boots:
        b.close()
    assert list(d.iterdir()) == []


# ---- placements -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RANK": "1", "WORLD_SIZE": "1"}, r"RANK=1 is out of range for WORLD_SIZE=1 \(0..0\)"),
        ({"RANK": "-1", "WORLD_SIZE": "2"}, r"RANK=-1 is out of range for WORLD_SIZE=2"),
        ({"RANK": "one", "WORLD_SIZE": "2"}, r"RANK='one' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, r"WORLD_SIZE=0 must be at least 1"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3"}, r"LOCAL_WORLD_SIZE=3 must be between 1 and"),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "no-such-host.invalid"},
            r"MASTER_ADDR='no-such-host.invalid' does not resolve",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_PORT": "99999"},
            r"MASTER_PORT='99999' is not a port number",
        ),
        ({"UNISHMEM_BOOTSTRAP_TIMEOUT": "soon"}, r"UNISHMEM_BOOTSTRAP_TIMEOUT='soon' is not a positive number"),
    ],
)
def test_bad_placement_fails_at_once_naming_the_variable(monkeypatch, env, message):
    _clear_launcher_env(monkeypatch)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29999")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises((ValueError, RendezvousError), match=message):
        bootstrap.discover()


def _clear_launcher_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("UNISHMEM_", "OMPI_", "PMI_", "SLURM_", "TORCHELASTIC_")) or k in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        ):
            monkeypatch.delenv(k)


@pytest.mark.parametrize(
    "var, value, message",
    [
        ("UNISHMEM_WAIT_TIMEOUT", "5min", "UNISHMEM_WAIT_TIMEOUT='5min' is not a positive number of seconds"),
        ("UNISHMEM_WAIT_TIMEOUT", "0", "UNISHMEM_WAIT_TIMEOUT='0' is not a positive number"),
        ("UNISHMEM_STALL_WARN", "-1", r"UNISHMEM_STALL_WARN='-1' is not a number of seconds >= 0"),
        ("UNISHMEM_DEADLOCK_TIMEOUT", "nan", r"UNISHMEM_DEADLOCK_TIMEOUT='nan' is not a number of seconds >= 0"),
        ("UNISHMEM_SYMMETRIC_SIZE", "lots", r"UNISHMEM_SYMMETRIC_SIZE: heap size 'lots' is not a byte count"),
    ],
)
def test_bad_settings_name_the_variable(monkeypatch, var, value, message):
    import unishmem

    _clear_launcher_env(monkeypatch)
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=message):
        unishmem.init(backend="host", heap_size=None if var == "UNISHMEM_SYMMETRIC_SIZE" else "1M")
    with pytest.raises(unishmem.NotInitializedError):
        unishmem.runtime()


# ---- inside a real job --------------------------------------------------------------------------
# A PE that checks, without importing torch, that neither it nor the launcher listens on a TCP port,
# and that the rendezvous socket and its directory are this user's alone.
NO_PORTS = """
import os, stat, sys
from unishmem.rendezvous import parse_address
def listening():
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                found.add(fields[9])
    return found
def sockets(pid):
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found
kind, path = parse_address(os.environ["UNISHMEM_RENDEZVOUS"])
mode = lambda p: oct(stat.S_IMODE(os.stat(p).st_mode))
ports = [pid for pid in (os.getpid(), os.getppid()) if sockets(pid) & listening()]
print(f"RENDEZVOUS {kind} dir={mode(os.path.dirname(path))} socket={mode(path)} listening={ports}")
"""


def test_job_listens_on_no_network_port():
    proc = subprocess.run(
        [sys.executable, "-m", "unishmem", "run", "-n", "2", sys.executable, "-c", NO_PORTS],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["RENDEZVOUS unix dir=0o700 socket=0o600 listening=[]"] * 2, proc.stdout


def test_a_second_rank_0_is_refused_and_a_dead_ones_file_swept(private):
    first = bootstrap._one_host(bootstrap.Placement(0, 2, 0, 2, "srun"), "a job", 0, 5)
    with pytest.raises(bootstrap.UnishmemError, match=r"two processes claim rank 0 of this srun job: pid \d+"):
        bootstrap._one_host(bootstrap.Placement(0, 2, 0, 2, "srun"), "a job", 0, 5)
    first.close()
    d = private / f"unishmem-{os.getuid()}"
    assert list(d.iterdir()) == []
    # a SIGKILLed rank 0's file: its writer is gone, so the next rank 0 removes it
    path, _ = bootstrap._rendezvous_file("an old job", 0)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps({"address": "unix:/nowhere", "secret": "x", "pid": 2**22 + 12345}).encode())
    os.close(fd)
    again = bootstrap._one_host(bootstrap.Placement(0, 1, 0, 1, "srun"), "a job", 1, 5)
    assert not os.path.exists(path)
    again.close()


def test_a_duplicate_rank_on_one_host_fails_at_once(private):
    """Rank 1 twice beside rank 0: the second is told at once, not after the bootstrap timeout."""
    rank0 = bootstrap._one_host(bootstrap.Placement(0, 2, 0, 2, "srun"), "a job", 0, 60)
    first = bootstrap._one_host(bootstrap.Placement(1, 2, 1, 2, "srun"), "a job", 0, 60)
    with pytest.raises(ValueError, match="two processes claim rank 1"):
        bootstrap._one_host(bootstrap.Placement(1, 2, 1, 2, "srun"), "a job", 0, 60)
    with pytest.raises(ValueError, match="two processes claim rank 1"):  # and the job's own ranks hear of it
        first.allgather(None)
    first.close()
    rank0.close()
