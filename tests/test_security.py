"""The rendezvous as an attacker and a careless user meet it (NOTE [rendezvous trust] in rendezvous.py):
nobody without the job secret reads or writes anything, nothing is unpickled, nothing listens beyond
the address a job needs, planted files are refused, and bad placements fail at once naming the variable."""

import json
import os
import pickle
import socket
import stat
import subprocess
import sys
import threading

import pytest

from unishmem import PeerFailure, bootstrap, rendezvous
from unishmem.rendezvous import Client, RendezvousError, Server

SECRET = b"0123456789abcdef" * 4


def gather_all(address: str, size: int, values, secret=SECRET, init=0) -> list:
    """Each of `size` ranks (threads) gathers its value once; returns each rank's result or exception."""
    results = [None] * size

    def rank(r):
        try:
            c = Client(address, secret, r, size, init, timeout=10)
            try:
                results[r] = c.gather(1, values[r])
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001 - the test looks at it
            results[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
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


def test_private_directory_must_be_ours_and_closed(private):
    d = private / f"unishmem-{os.getuid()}"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    with pytest.raises(RendezvousError, match="has mode 755; others may enter it"):
        rendezvous.private_dir()
    if os.getuid() == 0:
        os.chmod(d, 0o700)
        os.chown(d, 65534, 65534)
        with pytest.raises(RendezvousError, match="belongs to uid 65534"):
            rendezvous.private_dir()
    d.rmdir()
    os.symlink(private, d)
    with pytest.raises(RendezvousError, match="is not a directory"):
        rendezvous.private_dir()


def test_rank_0_serves_and_leaves_no_file(private):
    """The one-host path end to end, in threads: rank 0 serves, rank 1 finds it; nothing is left."""
    boots = [None, None]

    def rank(r):
        boots[r] = bootstrap._one_host(bootstrap.Placement(r, 2, r, 2, "srun"), "a job", 0, 10)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    results = [[None], [None]]
    ts = [
        threading.Thread(target=lambda r=r: results.__setitem__(r, boots[r].allgather(b"\x00" * r + b"x")))
        for r in (0, 1)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert results == [[b"x", b"\x00x"]] * 2  # bytes survive the JSON encoding
    d = private / f"unishmem-{os.getuid()}"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert [p.suffix for p in d.iterdir()] == [".sock"]  # the file went once both had joined
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
