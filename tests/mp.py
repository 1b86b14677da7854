"""Run a function on N real processes that join one interlink job (spawned, not forked)."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import secrets
import socket
import time
import traceback
from typing import Any, Callable


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _child(fn: Callable, rank: int, world: int, env: dict, args: tuple, q: Any) -> None:
    os.environ.update(env)
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world)
    os.environ["LOCAL_RANK"] = str(rank)
    try:
        res = fn(rank, world, *args)
        q.put(("ok", rank, res))
    except BaseException as e:  # report, the parent decides
        q.put(("err", rank, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class RankFailure(AssertionError):
    pass


def run_ranks(n: int, fn: Callable, *args: Any, env: dict | None = None, timeout: float = 120.0,
              expect_dead: tuple[int, ...] = ()) -> list[Any]:
    """Run fn(rank, world, *args) on n processes; returns per-rank results (None for ranks in
    expect_dead, which are allowed to die). Raises RankFailure with every failed rank's traceback."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    base = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "INTERLINK_SECRET": secrets.token_hex(16),
    }
    base.update(env or {})
    procs = [ctx.Process(target=_child, args=(fn, r, n, base, args, q), daemon=True) for r in range(n)]
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
