"""The rendezvous: a small server that a job's PEs reach during init to all-gather a few values.

NOTE [rendezvous trust]:
- A one-host job's server listens on a Unix socket in a directory that only this user can enter, so
  nothing listens on the network. A multi-host job's listens on TCP at the one address the other hosts
  use (MASTER_ADDR), never on every interface.
- Nothing another user can create stands in a job's way. `unishmem run` makes its directory with
  mkdtemp (a name nobody can predict, handed to its PEs in their environment). Ranks that rank 0 serves
  have no such channel, so they use names every rank can work out: `private_dir` takes the first of
  unishmem-<uid>, unishmem-<uid>-1, ... (in XDG_RUNTIME_DIR, else the temporary directory) that is a
  real 0700 directory of this user's, making it where the name is free, and passes over (never enters
  or removes) whatever else holds a name: another user must make one entry per name to move us one
  name on, and cannot stop us. Linux abstract sockets were the other choice: they leave nothing behind,
  but any process in the network namespace can reach them, and SO_PEERCRED alone cannot tell this
  user from another container's process with the same uid, so they would still need the file's secret.
- Every connection proves that it knows the job secret, and the server proves it back: HMAC-SHA256
  over a fresh nonce from the other side, compared in constant time. A client without the secret
  reads nothing and writes nothing. After that every message carries an HMAC under a key of the
  connection (`_Sealed`), so nothing can be injected into it, replayed or reordered on the way. A
  multi-host job's secret is UNISHMEM_SECRET, which the user gives every rank; without it the job still
  runs, unauthenticated, and says so.
- Messages are length-prefixed JSON, at most MAX_MESSAGE bytes; nothing is ever unpickled. Every value
  a rank receives is checked (bootstrap.Bootstrap.allgather): one that is not of the kind every rank
  sends, as a stranger in an unauthenticated job may send, is a RendezvousError naming the rank.
- The server knows who has joined. A PE that disconnects without saying goodbye (it died), or that
  the launcher reports gone, fails every gather still waiting for it with PeerFailure at once; a
  gather that does not complete within the timeout names the ranks it still waits for. A connection
  refused for the secret that claims a rank not yet joined (that rank, given a wrong UNISHMEM_SECRET
  or none, most likely) fails the gathers waiting for that rank at once, naming the claim: the price
  is that whoever can reach a multi-host job's port during init can end its init so (never join it).
- Nothing waits for a server that cannot come: a Unix socket's server listens before anyone is told
  its address, so a client that finds it missing or refusing fails at once naming the address; a TCP
  client retries until the timeout, as rank 0 on another host may not have started yet.
- Nothing outlives its job: rank 0 removes its rendezvous file and socket once every rank has
  connected (the first exchange) and on every error, and the next rank 0 removes a dead one's; the
  launcher's directory goes with the launcher, even a SIGKILLed one (launcher._Cleaner).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import itertools
import json
import os
import secrets
import socket
import stat
import tempfile
import threading
import time
import warnings
from typing import TypeGuard

from .errors import PeerFailure, UnishmemError, UnishmemWarning

MAX_MESSAGE = 1 << 20
_PROTOCOL = "unishmem-rendezvous-1"


class RendezvousError(UnishmemError):
    """The rendezvous refused this process or could not be reached."""


# ---- addresses ---------------------------------------------------------------------------------


def parse_address(text: str) -> tuple[str, str | tuple[str, int]]:
    """'unix:/path' -> ('unix', path); 'tcp:host:port' -> ('tcp', (host, port))."""
    kind, _, rest = text.partition(":")
    if kind == "unix" and rest:
        return kind, rest
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if host and port.isdigit():
            return kind, (host.strip("[]"), int(port))
    raise ValueError(f"rendezvous address {text!r} is not 'unix:PATH' or 'tcp:HOST:PORT'")


def resolve(host: str, port: int, what: str) -> tuple:
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise RendezvousError(f"{what}={host!r} does not resolve to an address ({e.strerror})") from None
    return family, addr


def private_dir() -> str:  # type: ignore[return]  # mypy: the loop over itertools.count() only ends in a return
    """This user's directory for rendezvous files and hang reports, in XDG_RUNTIME_DIR or else the
    temporary directory: the first of unishmem-<uid>, unishmem-<uid>-1, unishmem-<uid>-2, ... that is a
    real directory of this user's that nobody else can enter, made 0700 where the name is free. Anything
    else under one of those names (planted by another user, say) is passed over with a warning, never
    entered or removed (NOTE [rendezvous trust])."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    uid = os.getuid()
    for n in itertools.count():
        path = os.path.join(base, f"unishmem-{uid}" if n == 0 else f"unishmem-{uid}-{n}")
        st = _made_or_found(path)
        if stat.S_ISLNK(st.st_mode):
            why = "is a symbolic link"
        elif not stat.S_ISDIR(st.st_mode):
            why = "is not a directory"
        elif st.st_uid != uid:
            why = f"belongs to uid {st.st_uid}"
        elif stat.S_IMODE(st.st_mode) & 0o077:
            why = f"is open to others (mode {stat.S_IMODE(st.st_mode):o})"
        else:
            return path
        warnings.warn(
            f"{path} {why}: not a private directory of this user (uid {uid}); passing over it to the next name",
            UnishmemWarning,
            stacklevel=2,
        )


def _made_or_found(path: str) -> os.stat_result:
    """What is at `path` (not following a link), after making it a 0700 directory if nothing was."""
    while True:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise RendezvousError(f"cannot make a private directory {path}: {e.strerror}") from None
        try:
            return os.lstat(path)
        except FileNotFoundError:
            pass  # removed in between by whoever held it: the name is free again


# ---- framing ------------------------------------------------------------------------------------


def _send_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(len(data).to_bytes(4, "big") + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 16))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_frame(sock: socket.socket) -> bytes:
    n = int.from_bytes(_recv_exact(sock, 4), "big")
    if n > MAX_MESSAGE:
        raise ConnectionError(f"a message of {n} bytes is over the {MAX_MESSAGE}-byte limit")
    return _recv_exact(sock, n)


def _parse(body: bytes) -> dict:
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ConnectionError("a message is not a JSON object")
    return message


def _send(sock: socket.socket, message: dict) -> None:
    _send_frame(sock, json.dumps(message, separators=(",", ":")).encode())


def _recv(sock: socket.socket) -> dict:
    return _parse(_recv_frame(sock))


class _Sealed:
    """A connection past its handshake. Every message carries an HMAC, under a key of this connection
    (from the secret and both nonces), of its direction, its number and its text: nothing can be
    injected into the stream, replayed or reordered without the secret."""

    _TAG = hashlib.sha256().digest_size

    def __init__(self, sock: socket.socket, secret: bytes, server_nonce: str, client_nonce: str, role: str):
        self.sock = sock
        self._key = hmac.new(
            secret, f"{_PROTOCOL}|session|{server_nonce}|{client_nonce}".encode(), hashlib.sha256
        ).digest()
        self._role, self._peer = role, "client" if role == "server" else "server"
        self._sent = self._received = 0

    def _tag(self, role: str, number: int, body: bytes) -> bytes:
        return hmac.new(self._key, f"{role}|{number}|".encode() + body, hashlib.sha256).digest()

    def send(self, message: dict) -> None:
        body = json.dumps(message, separators=(",", ":")).encode()
        _send_frame(self.sock, self._tag(self._role, self._sent, body) + body)
        self._sent += 1

    def recv(self) -> dict:
        data = _recv_frame(self.sock)
        tag, body = data[: self._TAG], data[self._TAG :]
        if not hmac.compare_digest(tag, self._tag(self._peer, self._received, body)):
            raise ConnectionError("a message failed authentication (tampered with, replayed, or not from this job)")
        self._received += 1
        return _parse(body)


def _is_int(value) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _proof(secret: bytes, role: str, nonce: str, hello: dict | None = None) -> str:
    text = f"{_PROTOCOL}|{role}|{nonce}|{json.dumps(hello, sort_keys=True)}"
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()


# ---- server ------------------------------------------------------------------------------------


class Server:
    """Serves gathers for a job of `size` ranks until closed; runs in daemon threads."""

    def __init__(self, address: str, secret: bytes, size: int, timeout: float):
        self._secret, self.size, self.timeout = secret, size, timeout
        _, where = parse_address(address)
        if isinstance(where, str):  # unix:PATH
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)  # the socket file is 0600 from the start
            try:
                self._listener.bind(where)
            finally:
                os.umask(old)
            self._path: str | None = where
            self.address = address
        else:
            family, addr = resolve(*where, "the rendezvous host")
            self._listener = socket.socket(family, socket.SOCK_STREAM)
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(addr)
            self._path = None
            host, port = self._listener.getsockname()[:2]
            self.address = f"tcp:{where[0] if where[0] else host}:{port}"
        self._listener.listen(256)
        self._cond = threading.Condition()
        self._parts: dict[tuple[int, int], dict[int, object]] = {}  # (init, step) -> rank -> value
        self._taken: dict[tuple[int, int], set[int]] = {}
        self._members: dict[tuple[int, int], int] = {}  # (init, rank) -> pid of its live connection
        self._gone: dict[int, str] = {}  # rank -> why it can no longer take part
        self._refused: dict[int, str] = {}  # rank -> a connection that claimed it without the secret
        self._broken: str | None = None  # why the whole job cannot go on
        self._connections: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, name="unishmem-rendezvous", daemon=True).start()

    def mark_gone(self, rank: int, why: str) -> None:
        """Rank `rank` will not take part any more (the launcher saw its process end)."""
        with self._cond:
            self._gone.setdefault(rank, why)
            self._cond.notify_all()

    def unlink_socket(self) -> None:
        """Remove the Unix socket's name: no client will come any more (the connections stay)."""
        if self._path:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            connections = list(self._connections)
        for s in [self._listener, *connections]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.unlink_socket()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._cond:
                if self._closed:
                    conn.close()
                    return
                self._connections.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        member, said_bye = None, False
        try:
            conn.settimeout(30)  # a client that connects and says nothing is let go
            joined = self._handshake(conn)
            if joined is None:
                return
            member, channel = joined
            conn.settimeout(None)
            while True:
                message = channel.recv()
                if message.get("op") == "bye":
                    said_bye = True
                    return
                if message.get("op") != "gather" or not isinstance(message.get("step"), int):
                    channel.send({"error": "protocol", "message": f"unknown request {str(message)[:80]}"})
                    return
                channel.send(self._gather(member, message["step"], message.get("value")))
        except (OSError, ConnectionError, ValueError):
            pass  # a dead client, or one that spoke garbage: it leaves; the job goes on without its words
        finally:
            with self._cond:
                self._connections.discard(conn)
                if member is not None:
                    init, rank, pid = member
                    if self._members.get((init, rank)) == pid:
                        del self._members[(init, rank)]
                    if not said_bye and not self._closed:
                        self._gone.setdefault(
                            rank,
                            f"rank {rank} (pid {pid}) lost its connection to the rendezvous "
                            "(it died or stopped during init)",
                        )
                    self._cond.notify_all()
            conn.close()

    def _handshake(self, conn: socket.socket):
        nonce = secrets.token_hex(16)
        _send(conn, {"protocol": _PROTOCOL, "nonce": nonce})
        message = _recv(conn)
        hello, proof, client_nonce = message.get("hello"), message.get("proof"), message.get("nonce")
        if not (
            isinstance(hello, dict) and isinstance(proof, str) and isinstance(client_nonce, str)
        ) or not hmac.compare_digest(proof, _proof(self._secret, "client", nonce, hello)):
            self._note_refused(conn, hello)
            _send(conn, {"error": "auth", "message": "this connection does not know the job's secret"})
            return None
        rank, size, pid, init = (hello.get(k) for k in ("rank", "size", "pid", "init"))
        if not (_is_int(rank) and _is_int(size) and _is_int(pid) and _is_int(init)):
            _send(conn, {"error": "protocol", "message": f"malformed hello {hello}"})
            return None
        reply = {"proof": _proof(self._secret, "server", client_nonce)}
        with self._cond:
            if size != self.size:
                why = (
                    f"the PEs disagree on the job size: rank {rank} (pid {pid}) was told {size} PEs, "
                    f"the job has {self.size}"
                )
            elif not 0 <= rank < self.size:
                why = f"rank {rank} (pid {pid}) is out of range for a job of {self.size} PEs"
            elif (init, rank) in self._members:
                why = (
                    f"two processes claim rank {rank}: pid {self._members[(init, rank)]} and pid {pid} "
                    "(is the rank variable the same in both?)"
                )
            else:
                why = None
                self._members[(init, rank)] = pid
                self._refused.pop(rank, None)  # whoever was refused under its name, it was not this rank
            if why is not None:
                self._broken = self._broken or why
                self._cond.notify_all()
                _send(conn, {**reply, "error": "value", "message": why})
                return None
        _send(conn, {**reply, "ok": True})
        return (init, rank, pid), _Sealed(conn, self._secret, nonce, client_nonce, "server")

    def _note_refused(self, conn: socket.socket, hello) -> None:
        """A connection without the secret that claims a rank nobody holds: most likely that rank, given a
        wrong UNISHMEM_SECRET or none. It fails at once itself; the gathers waiting for it hear of it at
        once too, rather than at the timeout (NOTE [rendezvous trust])."""
        rank, pid = (hello.get(k) if isinstance(hello, dict) else None for k in ("rank", "pid"))
        if not (_is_int(rank) and 0 <= rank < self.size):
            return  # no gather waits for it
        try:
            peer = conn.getpeername()
        except OSError:  # it has gone already
            peer = None
        where = f", from {peer[0]}" if isinstance(peer, tuple) else ""
        with self._cond:
            if any(r == rank for _, r in self._members):
                return  # the rank is here: that was someone else
            self._refused.setdefault(
                rank,
                f"rank {rank} ({f'pid {pid}' if _is_int(pid) else 'no pid'}{where}) was refused: it does not "
                "know the job's secret (a different UNISHMEM_SECRET, or none)",
            )
            self._cond.notify_all()

    def _gather(self, member, step: int, value) -> dict:
        init, rank, _ = member
        key = (init, step)
        deadline = time.monotonic() + self.timeout
        with self._cond:
            parts = self._parts.setdefault(key, {})
            parts[rank] = value
            self._cond.notify_all()
            while len(parts) < self.size:
                if self._broken:
                    return {"error": "value", "message": self._broken}
                if self._closed:
                    return {"error": "peer_failure", "message": "the rendezvous server is shutting down"}
                missing = [r for r in range(self.size) if r not in parts]
                gone = [r for r in missing if r in self._gone]
                if gone:
                    return {"error": "peer_failure", "message": self._gone[gone[0]]}
                refused = [r for r in missing if r in self._refused]
                if refused:
                    return {"error": "refused", "message": self._refused[refused[0]]}
                left = deadline - time.monotonic()
                if left <= 0:
                    return {
                        "error": "timeout",
                        "message": f"init step {step}: no word from rank(s) "
                        f"{', '.join(map(str, missing))} within {self.timeout:.0f} s",
                    }
                self._cond.wait(min(left, 1.0))
            values = [parts[r] for r in range(self.size)]
            taken = self._taken.setdefault(key, set())
            taken.add(rank)
            if len(taken) == self.size:  # everyone has the result: forget it
                del self._parts[key], self._taken[key]
        return {"values": values}


# ---- client ------------------------------------------------------------------------------------

_ERRORS: dict[object, type[Exception]] = {"peer_failure": PeerFailure, "value": ValueError}  # by a reply's "error"


class Client:
    """One PE's connection to the rendezvous, for one init."""

    def __init__(
        self,
        address: str,
        secret: bytes,
        rank: int,
        size: int,
        init: int,
        timeout: float,
        connect_timeout: float | None = None,
    ):
        self.address, self.timeout = address, timeout
        self._sock = self._connect(address, timeout if connect_timeout is None else connect_timeout)
        self._sock.settimeout(timeout + 30)  # the server answers within its own timeout; this is a guard
        try:
            self._handshake(secret, {"rank": rank, "size": size, "pid": os.getpid(), "init": init})
        except BaseException:
            self._sock.close()
            raise

    @staticmethod
    def _connect(address: str, timeout: float) -> socket.socket:
        kind, where = parse_address(address)
        if isinstance(where, str):  # unix:PATH
            family, addr = socket.AF_UNIX, where
        else:
            family, addr = resolve(*where, "the rendezvous host")
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(max(1.0, min(10.0, deadline - time.monotonic())))
            try:
                sock.connect(addr)
                return sock
            except OSError as e:
                sock.close()
                # A Unix socket's server listens before anyone is told its address (`unishmem run` before
                # it starts the PEs, rank 0 before it writes its rendezvous file): one that is missing or
                # refuses has gone. A TCP one on another host may not have started yet.
                gone = kind == "unix" and e.errno in (errno.ENOENT, errno.ECONNREFUSED)
                waitable = e.errno in (errno.ECONNREFUSED, errno.EAGAIN) or isinstance(e, TimeoutError)
                if gone:
                    raise RendezvousError(
                        f"cannot reach the rendezvous at {address}: {e.strerror}; the process that served "
                        "it (`unishmem run`, or rank 0) has gone, or the address is wrong"
                    ) from None
                if not waitable or time.monotonic() > deadline:
                    raise RendezvousError(f"cannot reach the rendezvous at {address}: {e}") from None
                time.sleep(0.05)

    def _handshake(self, secret: bytes, hello: dict) -> None:
        try:
            greeting = _recv(self._sock)
            nonce = secrets.token_hex(16)
            if greeting.get("protocol") != _PROTOCOL or not isinstance(greeting.get("nonce"), str):
                raise RendezvousError(f"{self.address} does not speak {_PROTOCOL}")
            _send(
                self._sock,
                {"hello": hello, "nonce": nonce, "proof": _proof(secret, "client", greeting["nonce"], hello)},
            )
            reply = _recv(self._sock)
        except (OSError, ConnectionError, ValueError) as e:
            raise RendezvousError(f"the rendezvous at {self.address} broke off the handshake: {e}") from None
        if reply.get("error") == "auth":
            raise RendezvousError(
                f"the rendezvous at {self.address} refused this process: it does not know the "
                "job's secret (another job's server, or a different UNISHMEM_SECRET)"
            )
        if not isinstance(reply.get("proof"), str) or not hmac.compare_digest(
            reply["proof"], _proof(secret, "server", nonce)
        ):
            raise RendezvousError(
                f"the server at {self.address} does not know the job's secret: it is not this job's rendezvous"
            )
        if "error" in reply:
            raise _ERRORS.get(reply["error"], RendezvousError)(f"rendezvous: {reply.get('message')}")
        self._channel = _Sealed(self._sock, secret, greeting["nonce"], nonce, "client")

    def gather(self, step: int, value) -> list:
        """Every rank's JSON `value` for this step, in rank order."""
        try:
            self._channel.send({"op": "gather", "step": step, "value": value})
            reply = self._channel.recv()
        except (OSError, ConnectionError, ValueError) as e:
            raise PeerFailure(
                f"the rendezvous at {self.address} went away during init step {step} ({e}); the "
                "process that serves it (rank 0, or the launcher) died"
            ) from None
        if "values" in reply:
            return reply["values"]
        kind = reply.get("error")
        raise _ERRORS.get(kind, RendezvousError)(f"rendezvous: {reply.get('message')}")

    def close(self) -> None:
        try:
            self._channel.send({"op": "bye"})
        except OSError:
            pass
        self._sock.close()
