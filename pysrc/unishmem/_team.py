"""Team: a set of PEs of a runtime that synchronise and run collectives together (the host API's
teams; unishmem.kernels runs on them)."""

from __future__ import annotations

import itertools

from . import _config
from ._checks import as_index, check_pe

_TEAM_IDS = itertools.count()  # a Team's key for its kernel workspaces: backend slots are reused


class Team:
    """A set of PEs that can synchronise and run collectives together. `handle` is what Triton
    kernels take. Teams made by a split can be destroyed, also as a context manager."""

    def __init__(self, core, slot: int, name: str):
        # `core`: its runtime's Core (NOTE [private core]; untyped here: _core.py imports this module)
        self._core = core
        self.slot = slot  # the backend's number for the team
        self.handle: int = core.native.team_device_handle(slot)  # the vendor's (what kernels take); the slot on host
        self.name = name
        self.my_pe: int = core.native.team_my_pe(slot)
        self.n_pes: int = core.native.team_n_pes(slot)
        self._destroyed = False
        self.key = next(_TEAM_IDS)  # unique in the process: names it in workspace keys and custom ops

    def __repr__(self) -> str:
        state = " destroyed" if self._destroyed else ""
        return f"<unishmem.Team {self.name} handle={self.handle} my_pe={self.my_pe} n_pes={self.n_pes}{state}>"

    @property
    def destroyed(self) -> bool:
        return self._destroyed

    def belongs_to(self, core: object) -> bool:
        """Whether this team is one of `core`'s runtime's."""
        return self._core is core

    def check(self) -> int:
        """The backend's slot for the team, once its runtime is active and it is not destroyed."""
        self._core.check_active()
        if self._destroyed:
            raise ValueError(f"{self!r} was destroyed")
        return self.slot

    def translate_pe(self, pe: int, other_team: Team) -> int:
        """`pe` of this team as numbered in `other_team`; -1 if it is not a member."""
        h = self.check()
        check_pe(pe, self.n_pes, f"pe of {self.name}")
        return self._core.native.team_translate_pe(h, pe, self._core.checked_team(other_team).slot)

    def device_args(self) -> tuple[int, int, int]:
        """(start, stride, size): the team's members are the world PEs start + i * stride for
        i < size, in team order. For kernels that need the team's shape themselves; it is also
        the header of the device team descriptor (NOTE [team descriptor] in
        unishmem/language/_triton_impl.py). Every unishmem team is such a progression."""
        h = self.check()
        world = self._core.team_world.slot
        start = self._core.native.team_translate_pe(h, 0, world)
        stride = self._core.native.team_translate_pe(h, 1, world) - start if self.n_pes > 1 else 1
        return start, stride, self.n_pes

    def split_strided(self, start: int, stride: int, size: int) -> Team | None:
        """Collective over this team: members start, start+stride, ... (size of them).
        Returns None on PEs that are not members. A new team smaller than the world gets a team
        arena for unishmem.kernels (NOTE [workspaces]), which every PE of this team allocates."""
        h = self.check()

        def check():
            args = [
                as_index(v, f"split_strided: {name}")
                for name, v in (("start", start), ("stride", stride), ("size", size))
            ]
            for name, v, lo in zip(("start", "stride", "size"), args, (0, 1, 1)):
                if v < lo:
                    raise ValueError(f"split_strided: {name}={v} must be >= {lo}")
            last = args[0] + (args[2] - 1) * args[1]
            if last >= self.n_pes:
                raise ValueError(
                    f"split_strided(start={args[0]}, stride={args[1]}, size={args[2]}) reaches PE "
                    f"{last} of {self.name}, which has {self.n_pes} PEs"
                )
            return *args, self._arena_bytes()

        start, stride, size, arena_bytes = self._core.reject_on_error(h, check)
        handle = self._core.native.team_split_strided(h, start, stride, size)
        team = None if handle < 0 else Team(self._core, handle, f"{self.name}[{start}::{stride}x{size}]")
        self._core.workspaces.split(self, [(team, size < self._core.n_pes)], arena_bytes)
        return team

    def split_2d(self, xrange: int) -> tuple[Team, Team]:
        """Collective over this team: (the row of `xrange` consecutive PEs, the column of PEs
        `xrange` apart) that this PE belongs to; team arenas as for split_strided."""
        h = self.check()

        def check():
            x = as_index(xrange, "split_2d: xrange")
            if x < 1:
                raise ValueError(f"split_2d: xrange={x} must be >= 1")
            return x, self._arena_bytes()

        xrange, arena_bytes = self._core.reject_on_error(h, check)
        width = min(xrange, self.n_pes)  # a wider row is the whole team
        x, y = self._core.native.team_split_2d(h, width)
        x, y = Team(self._core, x, f"{self.name}.x{xrange}"), Team(self._core, y, f"{self.name}.y{xrange}")
        # known alike on every PE: a row is the world only if it is all of a world-sized team, a
        # column only if the rows of a world-sized team are 1 wide
        self._core.workspaces.split(
            self, [(x, width < self._core.n_pes), (y, self.n_pes < self._core.n_pes or width > 1)], arena_bytes
        )
        return x, y

    def _arena_bytes(self) -> int | None:
        """UNISHMEM_TEAM_ARENA where a split of this team is collective over the world, else None."""
        return _config.team_arena(self._core.heap_size) if self.n_pes == self._core.n_pes else None

    def destroy(self) -> None:
        """Collective over the team (every member destroys it, or none does)."""
        if self._destroyed or self._core.finalized:
            return
        if self is self._core.team_world or self is self._core.team_node:
            self._core.native.reject_collective(self.slot)
            raise ValueError(f"{self.name} team cannot be destroyed")
        self._core.native.team_destroy(self.slot)
        self._destroyed = True
        self._core.workspaces.forget_team(self)

    def __enter__(self) -> Team:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
