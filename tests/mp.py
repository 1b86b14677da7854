"""Run a function on N real processes that join one interlink job.

The ranks are forked from multiprocessing's forkserver: a clean single-threaded server process (one per
test process, started at the first call) that has imported numpy and pytest once (what every test module
imports: 0.45 s of CPU a rank on the project's VM, spawned, of a rank that often lives a second). Nothing
of interlink (or torch, which imports interlink through its backend entry point) is imported in the
server: interlink reads some settings from the environment as it is imported, and a rank must import it
after the test's ``env`` is applied, as a spawned rank does. A rank gets what a spawned one gets: the
test process's environment and working directory at the call, then ``env``; at its end its atexit
handlers run (interlink's destroy, finalizers), which a forked process would otherwise skip."""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import queue
import secrets
import socket
import time
import traceback
from typing import Any, Callable

#: what the server imports once for all its ranks (no module that reads INTERLINK_* variables on import)
PRELOAD = ("numpy", "pytest")


def need_torch_entry_point() -> None:
    """Skip the calling test unless interlink is installed with its ``torch.backends`` entry point (torch's
    backend autoload registers ``backend="interlink"`` through it)."""
    import importlib.metadata

    import pytest

    if not any(ep.name == "interlink" for ep in importlib.metadata.entry_points(group="torch.backends")):
        pytest.skip("interlink is not installed with its entry points (pip install -e .)")


_PORT_FLOOR = 10000
_port_next = 0


def free_port() -> int:
    """A loopback port for a job's MASTER_PORT that no other test takes before the job binds it: below the
    kernel's ephemeral range (bind to port 0 and every outgoing connection draw from that range, so a port
    found free there can be handed to another test's socket before rank 0 binds it: EADDRINUSE), in a slice
    of its own for each pytest-xdist worker, and free when chosen."""
    global _port_next
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            top = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        top = 32768
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    me = int((os.environ.get("PYTEST_XDIST_WORKER", "gw0") or "gw0").lstrip("gw") or 0) % workers
    width = max(1, (top - _PORT_FLOOR) // workers)
    base = _PORT_FLOOR + me * width
    if not _port_next:
        _port_next = os.getpid() % width
    for _ in range(width):
        port = base + _port_next % width
        _port_next += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    with socket.socket() as s:  # pragma: no cover - every port of the slice taken
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _context() -> Any:
    if "forkserver" not in mp.get_all_start_methods():  # pragma: no cover - not Linux
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def _child(fn: Callable, rank: int, world: int, environ: dict, cwd: str, env: dict, args: tuple, q: Any) -> None:
    os.environ.clear()  # the test process's environment now, not the server's from its start
    os.environ.update(environ)
    os.environ.update(env)
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world)
    os.environ["LOCAL_RANK"] = str(rank)
    os.chdir(cwd)
    try:
        try:
            res = fn(rank, world, *args)
            q.put(("ok", rank, res))
        except BaseException as e:  # report, the parent decides
            q.put(("err", rank, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        atexit._run_exitfuncs()  # as a spawned rank's interpreter exit does (a forked one ends in os._exit)


class RankFailure(AssertionError):
    pass


def run_ranks(n: int, fn: Callable, *args: Any, env: dict | None = None, timeout: float = 120.0,
              expect_dead: tuple[int, ...] = ()) -> list[Any]:
    """Run fn(rank, world, *args) on n processes; returns per-rank results (None for ranks in
    expect_dead, which are allowed to die). Raises RankFailure with every failed rank's traceback."""
    ctx = _context()
    q = ctx.Queue()
    base = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "INTERLINK_SECRET": secrets.token_hex(16),
    }
    base.update(env or {})
    here = (dict(os.environ), os.getcwd())
    procs = [ctx.Process(target=_child, args=(fn, r, n, *here, base, args, q), daemon=True) for r in range(n)]
    for p in procs:
        p.start()
    results: dict[int, tuple[str, Any]] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                status, rank, res = q.get(timeout=min(left, 0.5))
                results[rank] = (status, res)
            except queue.Empty:
                # a rank that died without reporting
                for r, p in enumerate(procs):
                    if r not in results and p.exitcode is not None:
                        # give the queue a moment: it may still hold this rank's report
                        try:
                            status, rank, res = q.get(timeout=0.5)
                            results[rank] = (status, res)
                        except queue.Empty:
                            results[r] = ("dead", f"exit code {p.exitcode}")
    finally:
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()) if len(results) == n else 0.1)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    missing = [r for r in range(n) if r not in results]
    bad = {r: v for r, v in results.items() if v[0] != "ok" and r not in expect_dead}
    if missing or bad:
        msg = [f"{len(bad)} rank(s) failed, {len(missing)} hung (timeout {timeout}s): missing={missing}"]
        for r, (st, res) in sorted(bad.items()):
            msg.append(f"--- rank {r} ({st}) ---\n{res}")
        raise RankFailure("\n".join(msg))
    return [results[r][1] if results[r][0] == "ok" else None for r in range(n)]
