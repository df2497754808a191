"""A real gloo process group over loopback, kept alive for a whole test module.

``Group(n)`` forks ``n`` workers that join one process group on 127.0.0.1 and a free port, then wait
for jobs. ``group.run(fn, *args)`` runs ``fn(rank, world_size, *args)`` on every worker at once and
returns each rank's outcome. Every call is bounded by a timeout: a hang kills the workers and fails
the test (the next test starts a fresh group). Forking skips re-importing torch (seconds on a busy
machine); the jobs are module-level functions of the test modules, pickled by name.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import socket
import time
import traceback
from typing import Any


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Outcome:
    """What a job did on one rank: its value, or the error it raised (type name and message)."""

    def __init__(self, ok: bool, value: Any = None, error: str = "", kind: str = "", trace: str = "") -> None:
        self.ok, self.value, self.error, self.kind, self.trace = ok, value, error, kind, trace

    def __repr__(self) -> str:
        return f"Outcome(ok, {self.value!r})" if self.ok else f"Outcome({self.kind}: {self.error})"


def _worker(rank: int, world: int, port: int, conn: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    conn.send(Outcome(True, "ready"))
    while True:
        job = conn.recv()
        if job is None:
            break
        fn, args = job
        try:
            conn.send(Outcome(True, fn(rank, world, *args)))
        except BaseException as err:  # every error goes back to the test, which asserts on it
            conn.send(Outcome(False, error=str(err), kind=type(err).__name__, trace=traceback.format_exc()))
    dist.destroy_process_group()


class Group:
    """``world`` forked workers in one gloo process group (see the module docstring)."""

    def __init__(self, world: int, timeout: float = 60.0) -> None:
        self.world = world
        ctx = multiprocessing.get_context("fork")
        port = free_port()
        self.conns, self.procs = [], []
        for rank in range(world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(rank, world, port, child), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        self._collect(timeout, "starting the process group")

    def _collect(self, timeout: float, what: str) -> list[Outcome]:
        deadline = time.monotonic() + timeout
        out: list[Outcome | None] = [None] * self.world
        while any(o is None for o in out):
            for rank, conn in enumerate(self.conns):
                if out[rank] is None and conn.poll(0.01):
                    out[rank] = conn.recv()
            if time.monotonic() > deadline:
                self.close(kill=True)
                waiting = [rank for rank, o in enumerate(out) if o is None]
                others = "".join(
                    f"\nrank {r}: {o.kind}: {o.error}\n{o.trace}"
                    for r, o in enumerate(out)
                    if o is not None and not o.ok
                )
                raise TimeoutError(f"{what}: ranks {waiting} did not answer within {timeout} s (a hang){others}")
            for rank, proc in enumerate(self.procs):
                if out[rank] is None and not proc.is_alive() and not self.conns[rank].poll(0):
                    self.close(kill=True)
                    raise RuntimeError(f"{what}: rank {rank} died (exit code {proc.exitcode})")
        return out  # type: ignore[return-value]

    @property
    def alive(self) -> bool:
        """Whether every worker still runs."""
        return all(p.is_alive() for p in self.procs)

    def outcomes(self, fn: Any, *args: Any, timeout: float = 30.0) -> list[Outcome]:
        """Run ``fn(rank, world, *args)`` on every rank; each rank's :class:`Outcome`."""
        for conn in self.conns:
            conn.send((fn, args))
        return self._collect(timeout, f"running {fn.__name__}")

    def run(self, fn: Any, *args: Any, timeout: float = 30.0) -> list[Any]:
        """Like :meth:`outcomes`, but the values, raising if any rank failed."""
        outs = self.outcomes(fn, *args, timeout=timeout)
        for rank, o in enumerate(outs):
            if not o.ok:
                raise AssertionError(f"rank {rank} raised {o.kind}: {o.error}\n{o.trace}")
        return [o.value for o in outs]

    def close(self, kill: bool = False) -> None:
        """Stop the workers (kill them after a hang)."""
        for proc, conn in zip(self.procs, self.conns, strict=False):
            if kill:
                proc.kill()
            else:
                try:
                    conn.send(None)
                except OSError:
                    proc.kill()
        for proc in self.procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


class Groups:
    """A module's process groups by size, restarted after a failure that killed one."""

    def __init__(self) -> None:
        self._groups: dict[int, Group] = {}

    def __call__(self, world: int) -> Group:
        group = self._groups.get(world)
        if group is None or not group.alive:
            group = self._groups[world] = Group(world)
        return group

    def close(self) -> None:
        for group in self._groups.values():
            group.close(kill=not group.alive)


os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
