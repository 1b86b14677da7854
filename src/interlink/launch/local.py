"""Start the ranks of one node, prefix their output, and stop them all when one fails.

The launcher is torchrun-like: each rank is a child process ``sys.executable script args`` (or
``-m module``) with the usual environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK/NODE_RANK, MASTER_ADDR, MASTER_PORT) plus INTERLINK_SECRET, the per-job secret the
runtime uses to authenticate connections. The children are supervised by
:mod:`interlink.launch.supervisor` (process groups, forwarded signals, first failure stops the rest).
"""

from __future__ import annotations

import collections
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Mapping, Sequence

from .supervisor import (DEFAULT_GRACE, Output, Signals, death_signal_preexec, describe_status, exit_status,
                         monitor, start_pumps, stop_all, write)

__all__ = ["DEFAULT_GRACE", "LaunchError", "free_port", "launch", "parse_master", "rank_env"]

TAIL_LINES = 30


class LaunchError(ValueError):
    """Bad launcher arguments or environment (raised before any process starts)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind port 0 and let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def parse_master(master: str) -> tuple[str, int]:
    host, sep, port = master.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise LaunchError(f"--master must be HOST:PORT, got {master!r}")
    return host.strip("[]"), int(port)


def rank_env(base: Mapping[str, str], *, local_rank: int, nproc: int, nnodes: int, node_rank: int,
             master_addr: str, master_port: int, secret: str) -> dict[str, str]:
    env = dict(base)
    env.update(
        RANK=str(node_rank * nproc + local_rank),
        WORLD_SIZE=str(nproc * nnodes),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(nproc),
        GROUP_RANK=str(node_rank),
        NODE_RANK=str(node_rank),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        INTERLINK_SECRET=secret,
        PYTHONUNBUFFERED="1",
    )
    return env


# ---- children ---------------------------------------------------------------------------------


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    threads: list = field(default_factory=list)
    also_failed: bool = False


# ---- the launcher -----------------------------------------------------------------------------


def launch(
    cmd: Sequence[str],
    nproc: int,
    *,
    nnodes: int = 1,
    node_rank: int = 0,
    master: str | None = None,
    grace: float = DEFAULT_GRACE,
    env: Mapping[str, str] | None = None,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
) -> int:
    """Run ``cmd`` (arguments after the Python interpreter) as ``nproc`` ranks of this node.

    Returns 0 when every rank exits 0; otherwise stops the other ranks, writes which rank failed
    first (exit code or signal, and the tail of its stderr) to ``stderr`` and returns a non-zero
    status: the failed rank's exit code, 128 + signal number for a signal, 128 + the signal the
    launcher itself received (SIGINT, SIGTERM, SIGHUP) when it was interrupted.
    """
    base_env = dict(os.environ if env is None else env)
    out_stream = stdout if stdout is not None else sys.stdout.buffer
    err_stream = stderr if stderr is not None else sys.stderr.buffer
    if nproc < 1:
        raise LaunchError(f"-n/--nproc-per-node must be >= 1, got {nproc}")
    if nnodes < 1:
        raise LaunchError(f"--nnodes must be >= 1, got {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise LaunchError(f"--node-rank {node_rank} out of range for --nnodes {nnodes}")
    if not cmd:
        raise LaunchError("nothing to run: give a script (or -m module)")
    if nnodes > 1:
        if master is None:
            raise LaunchError("--master HOST:PORT is required when --nnodes > 1 (the address of node 0)")
        secret = base_env.get("INTERLINK_SECRET", "")
        if not secret:
            raise LaunchError(
                "INTERLINK_SECRET must be set in the environment when --nnodes > 1: every node's launcher "
                "needs the same job secret (e.g. export INTERLINK_SECRET=$(python -c "
                "'import secrets; print(secrets.token_hex(32))') and copy it to every node)"
            )
        addr, port = parse_master(master)
    else:
        secret = secrets.token_hex(32)
        if master is not None:
            addr, port = parse_master(master)
        else:
            addr, port = "127.0.0.1", free_port("127.0.0.1")

    lock = threading.Lock()
    out, err = Output(out_stream, lock), Output(err_stream, lock)

    ranks: list[_Rank] = []
    preexec = death_signal_preexec()
    with Signals() as sigs:  # the launcher's own signals: remembered, the supervisor does the cleanup
        try:
            for local in range(nproc):
                renv = rank_env(base_env, local_rank=local, nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                                master_addr=addr, master_port=port, secret=secret)
                try:
                    proc = subprocess.Popen(
                        [sys.executable, *cmd], env=renv, stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        start_new_session=True, preexec_fn=preexec,
                    )
                except OSError as exc:
                    raise LaunchError(f"cannot start rank {node_rank * nproc + local}: {exc}") from exc
                ranks.append(_Rank(node_rank * nproc + local, proc))
            for r in ranks:
                r.threads = start_pumps(r.proc, f"[rank {r.rank}] ".encode(), out, err, r.tail,
                                        f"interlink-rank{r.rank}")
            failed, interrupted = monitor(ranks, sigs.received, grace)
        except BaseException:
            stop_all(ranks, grace)
            raise
    for r in ranks:
        for t in r.threads:
            t.join(timeout=2.0)  # a grandchild may hold the pipe open; do not hang on it

    if interrupted is not None:
        name = signal.Signals(interrupted).name
        write(err, f"interlink run: received {name}, stopped all {len(ranks)} local ranks\n")
        return 128 + int(interrupted)
    if failed is not None:
        failed = root_cause(failed, ranks)
        code = failed.proc.returncode
        others = [r.rank for r in ranks if r is not failed]
        lines = [f"interlink run: rank {failed.rank} {describe_status(code)} (first failure)"
                 + (f"; stopped ranks {others}" if others else "")]
        if failed.tail:
            lines.append(f"last {len(failed.tail)} lines of rank {failed.rank}'s stderr:")
            lines += [f"  {ln}" for ln in failed.tail]
        else:
            lines.append(f"rank {failed.rank} wrote nothing to stderr")
        write(err, "\n".join(lines) + "\n")
        return exit_status(code)
    return 0


#: what a rank's error says when it failed because another rank did (runtime/engine.py: translate)
_BECAUSE = re.compile(r"rank (\d+) (?:failed and aborted the job|died or closed its connection|left the job)")


def root_cause(failed: Any, ranks: Sequence[Any]) -> Any:
    """The rank to report as the first failure: the launcher sees the ranks' exits a poll apart, so the rank
    it saw first may have failed only because another did (its error names that rank: "rank 1 failed and
    aborted the job"). Follow such names to a rank that also failed and says no such thing."""
    by_rank = {r.rank: r for r in ranks}
    seen = {failed.rank}
    while True:
        found = None
        for ln in reversed(failed.tail or []):
            m = _BECAUSE.search(ln)
            if m:
                found = int(m.group(1))
                break
        other = by_rank.get(found) if found is not None else None
        if other is None or found in seen or other.proc.returncode in (None, 0):
            return failed
        seen.add(found)
        failed = other


