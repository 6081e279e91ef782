"""Who am I and who are my peers: rank discovery and a small exchange channel used during init.

Sources, in order: an explicit torch.distributed group; `unishmem run` (UNISHMEM_* variables and
the launcher's store); torchrun (its agent's TCPStore); mpirun (Open MPI, MPICH) and srun, which
give ranks but no channel: rank 0 then opens a TCPStore on loopback and publishes its port and a
per-job secret in a 0600 file named after the job. Multi-node jobs outside torchrun need
MASTER_ADDR and MASTER_PORT.
"""
from __future__ import annotations

import abc
import datetime
import os
import pickle
import secrets
import socket
import tempfile
import time
from dataclasses import dataclass

from .errors import UnishmemError

STORE_TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("UNISHMEM_BOOTSTRAP_TIMEOUT", "120")))


@dataclass
class Placement:
    rank: int
    size: int
    local_rank: int
    local_size: int
    launcher: str


class Bootstrap(abc.ABC):
    """A rank's view of the job plus an all-gather of small Python objects."""

    def __init__(self, placement: Placement):
        self.placement = placement
        self._seq = 0

    @property
    def rank(self) -> int:
        return self.placement.rank

    @property
    def size(self) -> int:
        return self.placement.size

    def allgather(self, obj) -> list:
        self._seq += 1
        return self._allgather(self._seq, obj)

    def broadcast(self, obj, root: int = 0):
        return self.allgather(obj if self.rank == root else None)[root]

    def barrier(self) -> None:
        self.allgather(None)

    @abc.abstractmethod
    def _allgather(self, seq: int, obj) -> list:
        """Every rank's `obj`, in rank order; `seq` numbers the calls."""

    def close(self) -> None:
        pass


class StoreBootstrap(Bootstrap):
    def __init__(self, placement: Placement, store, prefix: str):
        super().__init__(placement)
        self._store, self._prefix = store, prefix

    def _allgather(self, seq, obj):
        key = f"{self._prefix}/{seq}"
        self._store.set(f"{key}/{self.rank}", pickle.dumps(obj))
        return [pickle.loads(self._store.get(f"{key}/{r}")) for r in range(self.size)]

    def close(self):
        self._store = None


class GroupBootstrap(Bootstrap):
    def __init__(self, group):
        import torch.distributed as dist

        rank, size = dist.get_rank(group), dist.get_world_size(group)
        local = int(os.environ.get("LOCAL_RANK", rank)), int(os.environ.get("LOCAL_WORLD_SIZE", size))
        super().__init__(Placement(rank, size, local[0], local[1], "torch.distributed group"))
        self._group = group

    def _allgather(self, seq, obj):
        # Pickled bytes through tensor all_gathers (all_gather_object would need numpy).
        import torch
        import torch.distributed as dist

        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(self._group) == "nccl" \
            else torch.device("cpu")
        payload = pickle.dumps(obj)
        sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(self.size)]
        dist.all_gather(sizes, torch.tensor([len(payload)], device=device), group=self._group)
        longest = max(int(s.item()) for s in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8, device=device)
        mine[:len(payload)] = torch.tensor(list(payload), dtype=torch.uint8)
        parts = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(self.size)]
        dist.all_gather(parts, mine, group=self._group)
        return [pickle.loads(bytes(p[:int(n.item())].tolist())) for p, n in zip(parts, sizes)]

    def close(self):
        # Let go of the group: one kept alive past destroy_process_group() aborts the process at exit.
        self._group = None


def _env_int(*names: str) -> int | None:
    for n in names:
        if n in os.environ:
            return int(os.environ[n])
    return None


def _tcp_store(host: str, port: int, is_master: bool):
    from torch.distributed import TCPStore

    return TCPStore(host, port, is_master=is_master, wait_for_workers=False, timeout=STORE_TIMEOUT)


def _from_unishmem_run() -> Bootstrap:
    p = Placement(int(os.environ["UNISHMEM_RANK"]), int(os.environ["UNISHMEM_WORLD_SIZE"]),
                  int(os.environ["UNISHMEM_LOCAL_RANK"]), int(os.environ["UNISHMEM_LOCAL_WORLD_SIZE"]),
                  "unishmem run")
    host, port = os.environ["UNISHMEM_STORE"].rsplit(":", 1)
    secret = os.environ["UNISHMEM_SECRET"]
    store = _tcp_store(host, int(port), False)
    _check_secret(store, secret)
    return StoreBootstrap(p, store, f"unishmem/{secret}")


def _check_secret(store, secret: str) -> None:
    # The launcher sets this key; a store that lacks it belongs to some other job.
    if not store.check([f"unishmem/{secret}/ok"]):
        raise UnishmemError("the rendezvous store does not hold this job's secret: it belongs to another job")


def _from_torchrun() -> Bootstrap:
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = _env_int("LOCAL_RANK") or 0, _env_int("LOCAL_WORLD_SIZE") or size
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = _tcp_store(host, port, is_master=(rank == 0 and not agent_store))
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "default")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return StoreBootstrap(Placement(rank, size, local[0], local[1], "torchrun"), store,
                          f"unishmem/{run_id}/{restart}")


def _mpi_like_placement() -> Placement | None:
    """Open MPI, MPICH (Hydra) and Slurm say who we are in their environment."""
    for rank, size, lrank, lsize, name in (
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
         "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun (Open MPI)"),
        ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "mpirun (MPICH)"),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "srun"),
    ):
        if rank in os.environ and size in os.environ:
            n = int(os.environ[size])
            lr = _env_int(lrank)
            ls = os.environ.get(lsize, "")
            return Placement(int(os.environ[rank]), n, lr if lr is not None else int(os.environ[rank]),
                             int(ls) if ls.isdigit() else n, name)
    return None


def _job_key(p: Placement) -> str:
    # The launcher's job id where it gives one, and our parent (mpirun's daemon, Hydra's proxy,
    # slurmstepd), which all local ranks share and concurrent jobs do not.
    ids = [os.environ.get(v, "") for v in ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID",
                                           "SLURM_STEP_ID", "PMI_PORT")]
    raw = "-".join(i for i in ids if i) + f"-{os.getppid()}"
    return "".join(c if c.isalnum() else "_" for c in raw)[-80:]


def _from_mpi_like(p: Placement) -> Bootstrap:
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        store = _tcp_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), p.rank == 0)
        return StoreBootstrap(p, store, f"unishmem/{_job_key(p)}")
    if p.local_size != p.size:
        raise UnishmemError(f"{p.launcher} placed PEs on several nodes: set MASTER_ADDR and MASTER_PORT "
                            "(reachable from every node) for the rendezvous")
    path = os.path.join(tempfile.gettempdir(), f"unishmem-{os.getuid()}-{_job_key(p)}.rendezvous")
    if p.rank == 0:
        secret = secrets.token_hex(16)
        store = _tcp_store("127.0.0.1", 0, True)
        store.set(f"unishmem/{secret}/ok", "1")
        tmp = f"{path}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{store.port} {secret}\n")
        os.replace(tmp, path)
        boot = StoreBootstrap(p, store, f"unishmem/{secret}")
        boot.barrier()  # everyone has connected: the file has served its purpose
        os.unlink(path)
        return boot
    deadline = time.monotonic() + STORE_TIMEOUT.total_seconds()
    while True:
        try:
            port, secret = open(path).read().split()
            store = _tcp_store("127.0.0.1", int(port), False)
            _check_secret(store, secret)
            break
        except (OSError, ValueError, RuntimeError, UnishmemError) as e:  # not written yet, or a stale file
            if time.monotonic() > deadline:
                raise UnishmemError(f"rank {p.rank}: no rendezvous from rank 0 through {path} within "
                                    f"{STORE_TIMEOUT.total_seconds():.0f} s ({e})") from e
            time.sleep(0.05)
    boot = StoreBootstrap(p, store, f"unishmem/{secret}")
    boot.barrier()
    return boot


def discover(group=None) -> Bootstrap:
    """The bootstrap for this process, or a single-PE one when nothing launched it."""
    if group is not None:
        return GroupBootstrap(group)
    if "UNISHMEM_STORE" in os.environ:
        return _from_unishmem_run()
    if "TORCHELASTIC_RUN_ID" in os.environ or all(
            v in os.environ for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return _from_torchrun()
    p = _mpi_like_placement()
    if p is not None:
        return _from_mpi_like(p)
    return SingleBootstrap()


class SingleBootstrap(Bootstrap):
    """A process started on its own is a job of one PE."""

    def __init__(self):
        super().__init__(Placement(0, 1, 0, 1, "none (single process)"))

    def _allgather(self, seq, obj):
        return [obj]


def hostname() -> str:
    return socket.gethostname()
