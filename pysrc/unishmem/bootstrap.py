"""Who am I and who are my peers: rank discovery, and the all-gather of small values that init needs.

Sources, in order: an explicit torch.distributed group; `unishmem run` (UNISHMEM_* variables and the
launcher's rendezvous); torchrun and plain RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; mpirun (Open MPI,
MPICH) and srun. Outside `unishmem run` and a group, rank 0 serves the rendezvous (rendezvous.py):
on one host behind a Unix socket whose address and secret it leaves in a 0600 file of this user's
0700 directory, across hosts on TCP at MASTER_ADDR (see NOTE [rendezvous trust]).

Values cross as JSON (bytes as hex), never pickled. Each init of a process is numbered, and all its
exchanges carry the number, so an init after a finalize never reads the previous one's values.
"""

from __future__ import annotations

import abc
import errno
import hashlib
import itertools
import json
import os
import secrets
import socket
import stat
import time
import warnings
from dataclasses import dataclass

from . import _config, rendezvous
from ._config import seconds
from .errors import PeerFailure, UnishmemError

_inits = itertools.count()  # this process's inits; every PE of a job counts the same


@dataclass
class Placement:
    rank: int
    size: int
    local_rank: int
    local_size: int
    launcher: str


def _encode(obj):
    if isinstance(obj, bytes):
        return {"bytes": obj.hex()}
    if isinstance(obj, (list, tuple)):
        return [_encode(o) for o in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"the bootstrap exchanges JSON values and bytes, not {type(obj).__name__}")


def _decode(obj):
    """The value `_encode` made; ValueError for anything else."""
    if isinstance(obj, dict):
        if list(obj) != ["bytes"] or not isinstance(obj["bytes"], str):
            raise ValueError("a JSON object that is not bytes")
        return bytes.fromhex(obj["bytes"])
    if isinstance(obj, list):
        return [_decode(o) for o in obj]
    return obj


def _like(mine, theirs) -> bool:
    """Whether `theirs` (decoded) is a value of the kind of `mine`: of the same type, and for a list, a
    list as long of values like mine, element by element."""
    if isinstance(mine, (list, tuple)):
        return isinstance(theirs, list) and len(theirs) == len(mine) and all(map(_like, mine, theirs))
    return type(theirs) is type(mine)


def _kind_name(kind: type) -> str:
    if kind is type(None):
        return "None"
    return f"{'an' if kind.__name__[0] in 'aeiou' else 'a'} {kind.__name__}"


def _kind_of(value) -> str:
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} ({', '.join(type(v).__name__ for v in value)})"
    return _kind_name(type(value))


def _shown(value) -> str:
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return text if value is None else f"{text} ({type(value).__name__})"


class Bootstrap(abc.ABC):
    """A rank's view of the job plus an all-gather of small values (JSON types and bytes)."""

    def __init__(self, placement: Placement, init: int = 0):
        self.placement = placement
        self.init = init  # which of this process's inits: segment names and keys carry it
        self._step = 0

    @property
    def rank(self) -> int:
        return self.placement.rank

    @property
    def size(self) -> int:
        return self.placement.size

    def allgather(self, obj, kinds: tuple[type, ...] | None = None) -> list:
        """Every rank's `obj`, in rank order. Each must be of one of the types `kinds` or, without them,
        of the kind of this rank's own `obj`: anything else is a RendezvousError naming the rank that
        sent it (a stranger's value must not reach code that trusts its type)."""
        values = [self._decoded(rank, v) for rank, v in enumerate(self._exchange(obj))]
        for rank, value in enumerate(values):
            if kinds is None and not _like(obj, value):
                self._refuse(rank, value, f"where every rank sends {_kind_of(obj)}")
            if kinds is not None and type(value) not in kinds:
                self._refuse(rank, value, f"where every rank sends {' or '.join(map(_kind_name, kinds))}")
        return values

    def broadcast(self, obj, root: int = 0):
        """The root's `obj`; of the kind of this rank's own, unless that is None."""
        value = self._decoded(root, self._exchange(obj if self.rank == root else None)[root])
        if obj is not None and not _like(obj, value):
            self._refuse(root, value, f"where the root sends {_kind_of(obj)}")
        return value

    def _exchange(self, obj) -> list:
        self._step += 1
        values = self._allgather(self._step, _encode(obj))
        if not isinstance(values, list) or len(values) != self.size:
            raise rendezvous.RendezvousError(
                f"init exchange {self._step} returned {_shown(values)}, not one value for each of {self.size} ranks"
            )
        return values

    def _decoded(self, rank: int, value):
        try:
            return _decode(value)
        except ValueError:
            raise rendezvous.RendezvousError(
                f"rank {rank} sent {_shown(value)}, which is not a value the bootstrap exchanges (JSON, with "
                'bytes as {"bytes": hex}), in init exchange {self._step}: is it a process of this job?'
            ) from None

    def _refuse(self, rank: int, value, expected: str):
        raise rendezvous.RendezvousError(
            f"rank {rank} sent {_shown(value)} in init exchange {self._step}, {expected}: is it a process of "
            "this job, running this version of unishmem?"
        )

    def barrier(self) -> None:
        self.allgather(None)

    @abc.abstractmethod
    def _allgather(self, step: int, value) -> list:
        """Every rank's JSON `value`, in rank order; `step` numbers the calls."""

    def close(self) -> None:  # noqa: B027 (most bootstraps hold nothing to close)
        pass


class RendezvousBootstrap(Bootstrap):
    """Gathers through a rendezvous server; rank 0 may be serving it itself (`server`), and may hold
    a rendezvous file to remove, with the server's socket, once every rank has connected (`leftover`):
    a program that fails after init may never close its bootstrap."""

    def __init__(
        self,
        placement: Placement,
        init: int,
        client: rendezvous.Client,
        server: rendezvous.Server | None = None,
        leftover: str | None = None,
        rendezvous_file: str | None = None,
    ):
        super().__init__(placement, init)
        self._client, self._server, self._leftover = client, server, leftover
        self._rendezvous_file = rendezvous_file  # rank 0's, which another rank read

    def _allgather(self, step, value):
        try:
            values = self._client.gather(step, value)
        except PeerFailure:
            if self._rendezvous_file:  # rank 0 may have died holding it: nobody else would remove it
                _remove_if_writer_died(self._rendezvous_file, grace=1.0)
            raise
        self._remove_leftover()  # every rank has connected: the file has done its job
        return values

    def _remove_leftover(self):
        if self._leftover:
            assert self._server is not None  # the file is rank 0's, which serves the rendezvous until close
            self._server.unlink_socket()
            _unlink(self._leftover)  # last: while it is there, a sweep finds the socket by it
            self._leftover = None

    def close(self):
        self._remove_leftover()
        self._client.close()
        if self._server is not None:
            self._server.close()
            self._server = None


class GroupBootstrap(Bootstrap):
    """Over an existing torch.distributed group, whose members this process already trusts."""

    def __init__(self, group, init: int):
        import torch.distributed as dist

        rank, size = dist.get_rank(group), dist.get_world_size(group)
        local = _int_var("LOCAL_RANK", rank), _int_var("LOCAL_WORLD_SIZE", size)
        super().__init__(Placement(rank, size, local[0], local[1], "torch.distributed group"), init)
        self._group = group

    def _allgather(self, step, value):
        # JSON bytes through tensor all_gathers (all_gather_object would unpickle, and needs numpy).
        import torch
        import torch.distributed as dist

        device = (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend(self._group) == "nccl"
            else torch.device("cpu")
        )
        payload = json.dumps(value).encode()
        sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(self.size)]
        dist.all_gather(sizes, torch.tensor([len(payload)], device=device), group=self._group)
        longest = max(int(s.item()) for s in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8, device=device)
        mine[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        parts = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(self.size)]
        dist.all_gather(parts, mine, group=self._group)
        return [json.loads(bytes(p[: int(n.item())].tolist())) for p, n in zip(parts, sizes)]

    def close(self):
        # Let go of the group: one kept alive past destroy_process_group() aborts the process at exit.
        self._group = None


class SingleBootstrap(Bootstrap):
    """A process started on its own is a job of one PE."""

    def __init__(self, init: int = 0):
        super().__init__(Placement(0, 1, 0, 1, "none (single process)"), init)

    def _allgather(self, step, value):
        return [value]


# ---- placements, checked where they come from -------------------------------------------------


def _int_var(name: str, default: int | None = None) -> int:
    text = os.environ.get(name)
    if text is None:
        if default is None:
            raise ValueError(f"{name} is not set")
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def _placement(rank_var: str, size_var: str, local_rank_var: str, local_size_var: str, launcher: str) -> Placement:
    size = _int_var(size_var)
    if size < 1:
        raise ValueError(f"{size_var}={size} must be at least 1")
    rank = _int_var(rank_var)
    if not 0 <= rank < size:
        raise ValueError(f"{rank_var}={rank} is out of range for {size_var}={size} (0..{size - 1})")
    text = os.environ.get(local_size_var, "").strip()
    # Slurm writes "2(x3),1" when tasks per node vary: a job of several hosts, sized below
    local_size = size if not text or (launcher == "srun" and not text.isdigit()) else _int_var(local_size_var)
    if not 1 <= local_size <= size:
        raise ValueError(f"{local_size_var}={local_size} must be between 1 and {size_var}={size}")
    local_rank = _int_var(local_rank_var, rank % local_size)
    if not 0 <= local_rank < local_size:
        raise ValueError(f"{local_rank_var}={local_rank} is out of range for {local_size_var}={local_size}")
    return Placement(rank, size, local_rank, local_size, launcher)


_MPI_LIKE = (
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "mpirun (Open MPI)",
    ),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "mpirun (MPICH)"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "srun"),
)


def _mpi_like_placement() -> Placement | None:
    """Open MPI, MPICH (Hydra) and Slurm say who we are in their environment."""
    for rank, size, lrank, lsize, name in _MPI_LIKE:
        if rank in os.environ and size in os.environ:
            return _placement(rank, size, lrank, lsize, name)
    return None


# ---- where the rendezvous is --------------------------------------------------------------------


def _job_secret(multi_host: bool) -> bytes:
    """UNISHMEM_SECRET where the user gives one; across hosts there is no other way to share one."""
    text = _config.get("UNISHMEM_SECRET")
    if text:
        return text.encode()
    if multi_host:
        from .errors import UnishmemWarning

        warnings.warn(
            "this multi-host job's rendezvous is not authenticated: anyone who can reach MASTER_ADDR:"
            "MASTER_PORT during init can join or disturb it (it can run no code: values are JSON). Set "
            "UNISHMEM_SECRET to the same random value on every rank to authenticate it",
            UnishmemWarning,
            stacklevel=4,
        )
        return b""
    return secrets.token_hex(32).encode()


def _rendezvous_file(job: str, init: int) -> tuple[str, str]:
    """This job's rendezvous file and socket, named by a hash of what identifies the job and the init."""
    name = hashlib.sha256(f"{job}|{init}".encode()).hexdigest()[:24]
    d = rendezvous.private_dir()
    return os.path.join(d, f"{name}.json"), os.path.join(d, f"{name}.sock")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (died, not yet reaped by its parent) is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def _remove_if_writer_died(path: str, grace: float = 0.0) -> None:
    """A rendezvous file and its socket, removed if the rank 0 that wrote it is gone (it died before
    removing them). `grace`: seconds to let a writer that is dying (its connection dropped) finish."""
    try:
        pid = int(json.loads(_read_private(path))["pid"])
    except (OSError, ValueError, KeyError, TypeError, UnishmemError):
        return
    deadline = time.monotonic() + grace
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)
    _unlink(path[: -len(".json")] + ".sock")
    _unlink(path)  # last: while it is there, a sweep finds the socket by it


def _sweep_stale(directory: str) -> None:
    """Rendezvous files and sockets of rank-0 processes that died before removing them."""
    for entry in os.scandir(directory):
        if entry.name.endswith(".json"):
            _remove_if_writer_died(entry.path)


class RefusedFile(rendezvous.RendezvousError):
    """A rendezvous file that someone else could have written."""


def _read_private(path: str) -> str:
    """A rendezvous file's text, refused unless it is a regular file of this user's that only it can read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise RefusedFile(f"rendezvous file {path} is a symbolic link: refused") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(f"rendezvous file {path} is not a regular file: refused")
        if st.st_uid != os.getuid():
            raise RefusedFile(
                f"rendezvous file {path} belongs to uid {st.st_uid}, not to this user (uid {os.getuid()}): refused"
            )
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise RefusedFile(f"rendezvous file {path} has mode {stat.S_IMODE(st.st_mode):o}: refused")
        return os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)


def _one_host(p: Placement, job: str, init: int, timeout: float) -> Bootstrap:
    """Rank 0 serves on a Unix socket and leaves its address and the secret in a private file."""
    path, sock_path = _rendezvous_file(job, init)
    if p.rank == 0:
        _sweep_stale(os.path.dirname(path))  # and this job's own file, if its writer is gone
        try:
            other = int(json.loads(_read_private(path))["pid"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            other = None
        if other is not None:
            raise UnishmemError(
                f"two processes claim rank 0 of this {p.launcher} job: pid {other} already serves "
                f"its rendezvous ({path}); is the rank variable the same in both?"
            )
        _unlink(sock_path)
        secret = _job_secret(False)
        server = rendezvous.Server(f"unix:{sock_path}", secret, p.size, timeout)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"address": server.address, "secret": secret.decode(), "pid": os.getpid()}, f)
            client = rendezvous.Client(server.address, secret, p.rank, p.size, init, timeout)
        except BaseException:
            _unlink(path)
            server.close()
            raise
        return RendezvousBootstrap(p, init, client, server, leftover=path)
    deadline = time.monotonic() + timeout
    last: Exception  # why the latest try failed
    while True:
        try:
            info = json.loads(_read_private(path))
            address, secret, pid = info["address"], info["secret"].encode(), int(info["pid"])
            if not pid_alive(pid):
                _remove_if_writer_died(path)  # rank 0 died before every rank came; a new one may write it again
                raise FileNotFoundError(f"{path} was left by a process that is gone")
        except RefusedFile:
            raise
        except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError) as e:
            last = e  # not written yet, half written, or stale
        else:
            try:
                client = rendezvous.Client(address, secret, p.rank, p.size, init, timeout, connect_timeout=2.0)
                return RendezvousBootstrap(p, init, client, rendezvous_file=path)
            except rendezvous.RendezvousError as e:  # a stale file's socket: rank 0 will replace it
                last = e
        if time.monotonic() > deadline:
            raise UnishmemError(
                f"rank {p.rank}: rank 0 ({p.launcher}) published no rendezvous at {path} within "
                f"{timeout:.0f} s ({last}); if the ranks run on several hosts, set LOCAL_WORLD_SIZE "
                "or MASTER_ADDR and MASTER_PORT"
            )
        time.sleep(0.05)


def _routable_address(host: str, port: int) -> str:
    """This host's address on the route to `host`: the one the other hosts can reach us at."""
    family, addr = rendezvous.resolve(host, port, "MASTER_ADDR")
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(addr)  # UDP: picks the route, sends nothing
        return s.getsockname()[0]


def _master() -> tuple[str, int]:
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not host or not port:
        raise UnishmemError(
            "the ranks of this job run on several hosts: set MASTER_ADDR and MASTER_PORT (reachable "
            "from every host) for the rendezvous"
        )
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 < number < 65536:
        raise ValueError(f"MASTER_PORT={port!r} is not a port number (1..65535)")
    rendezvous.resolve(host, number, "MASTER_ADDR")  # fail now, not after a connect timeout
    return host, number


def _multi_host(p: Placement, init: int, timeout: float, agent_store: bool) -> Bootstrap:
    """Rank 0 serves on TCP: at MASTER_ADDR:MASTER_PORT, or where torchrun's agent holds that port, on a
    free port of its address towards MASTER_ADDR, published in the agent's store (not secret)."""
    host, port = _master()
    secret = _job_secret(True)
    store = None
    if agent_store:
        from datetime import timedelta

        from torch.distributed import TCPStore

        store = TCPStore(host, port, is_master=False, wait_for_workers=False, timeout=timedelta(seconds=timeout))
        key = (
            f"unishmem/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
            f"/{init}/rendezvous"
        )
    server = None
    if p.rank == 0:
        bind = f"tcp:{_routable_address(host, port)}:0" if agent_store else f"tcp:{host}:{port}"
        server = rendezvous.Server(bind, secret, p.size, timeout)
        if store is not None:
            store.set(key, server.address)
        address = server.address
    else:
        address = _agent_get(store, key, timeout) if store is not None else f"tcp:{host}:{port}"
    try:
        client = rendezvous.Client(address, secret, p.rank, p.size, init, timeout)
    except BaseException:
        if server is not None:
            server.close()
        raise
    return RendezvousBootstrap(p, init, client, server)


def _agent_get(store, key: str, timeout: float) -> str:
    try:
        return store.get(key).decode()
    except RuntimeError as e:  # torch's DistStoreError: a timeout, or the agent went away
        raise UnishmemError(
            f"rank 0 published no rendezvous address in torchrun's store within {timeout:.0f} s "
            f"(did rank 0 die before init?): {e}"
        ) from None


def _launcher_ids() -> str:
    # The launcher's job id where it gives one, and our parent (mpirun's daemon, Hydra's proxy,
    # slurmstepd), which all local ranks share and concurrent jobs do not.
    ids = [
        os.environ.get(v, "")
        for v in ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMI_PORT")
    ]
    return "-".join(i for i in ids if i) + f"-{os.getppid()}"


def discover(group=None) -> Bootstrap:
    """The bootstrap for this process, or a single-PE one when nothing launched it."""
    init = next(_inits)
    if group is not None:
        return GroupBootstrap(group, init)
    timeout = seconds("UNISHMEM_BOOTSTRAP_TIMEOUT")
    address = _config.protocol("UNISHMEM_RENDEZVOUS")
    if address is not None:  # unishmem run
        p = _placement(
            "UNISHMEM_RANK", "UNISHMEM_WORLD_SIZE", "UNISHMEM_LOCAL_RANK", "UNISHMEM_LOCAL_WORLD_SIZE", "unishmem run"
        )
        client = rendezvous.Client(
            address,
            (_config.get("UNISHMEM_SECRET") or "").encode(),
            p.rank,
            p.size,
            init,
            timeout,
        )
        return RendezvousBootstrap(p, init, client)
    torchrun = "TORCHELASTIC_RUN_ID" in os.environ
    if torchrun or all(v in os.environ for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        p = _placement("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun")
        if p.local_size == p.size:
            # No parent in the name: ranks started by hand may have different ones; the port names the job.
            job = "torchrun|" + "|".join(
                os.environ.get(v, "")
                for v in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")
            )
            return _one_host(p, job, init, timeout)
        return _multi_host(p, init, timeout, agent_store=torchrun)
    mpi = _mpi_like_placement()
    if mpi is None:
        return SingleBootstrap(init)
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return _multi_host(mpi, init, timeout, agent_store=False)
    if mpi.local_size != mpi.size:
        _master()  # raises: say what is missing
    return _one_host(mpi, f"{mpi.launcher}|{_launcher_ids()}", init, timeout)


def hostname() -> str:
    return socket.gethostname()
