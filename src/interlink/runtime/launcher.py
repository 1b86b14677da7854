"""Start the ranks of one node, prefix their output, and stop them all when one fails.

The launcher is torchrun-like: each rank is a child process ``sys.executable script args`` (or
``-m module``) with the usual environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK/NODE_RANK, MASTER_ADDR, MASTER_PORT) plus INTERLINK_SECRET, the per-job secret the
runtime uses to authenticate connections.

Every child runs in its own process group (a new session), so that a rank and whatever it
spawned are stopped together with ``killpg``: SIGTERM first (or the SIGINT/SIGHUP the launcher
itself received, forwarded), SIGKILL after a grace period. On
Linux the children also get SIGKILL should the launcher itself die (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Mapping, Sequence

TAIL_LINES = 30
DEFAULT_GRACE = 3.0
_POLL = 0.05


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


def _death_signal_preexec():
    """preexec_fn that asks Linux to SIGKILL the child when the launcher dies (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    PR_SET_PDEATHSIG = 1

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before prctl took effect
            os._exit(1)

    return preexec


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    threads: list = field(default_factory=list)


class _Output:
    """Writes whole prefixed lines to a binary stream, one lock for all ranks."""

    def __init__(self, stream: BinaryIO, lock: threading.Lock) -> None:
        self.stream = stream
        self.lock = lock

    def write_line(self, data: bytes) -> None:
        with self.lock:
            try:
                self.stream.write(data)
                self.stream.flush()
            except (OSError, ValueError):  # closed or broken pipe: keep draining the child
                pass


def _pump(pipe: BinaryIO, prefix: bytes, out: _Output, tail: collections.deque | None) -> None:
    with pipe:
        for line in iter(pipe.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            out.write_line(prefix + line)
            if tail is not None:
                tail.append(line.decode("utf-8", "replace").rstrip("\n"))


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _describe_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


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
    out, err = _Output(out_stream, lock), _Output(err_stream, lock)

    # the launcher's own signals: remember the first, the loop below does the cleanup
    received: list[int] = []
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old_handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in handled:
            try:
                old_handlers[sig] = signal.signal(sig, lambda signum, frame: received.append(signum))
            except (ValueError, OSError):
                pass

    ranks: list[_Rank] = []
    preexec = _death_signal_preexec()
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
            prefix = f"[rank {r.rank}] ".encode()
            for pipe, sink, tail in ((r.proc.stdout, out, None), (r.proc.stderr, err, r.tail)):
                t = threading.Thread(target=_pump, args=(pipe, prefix, sink, tail),
                                     name=f"interlink-rank{r.rank}-io", daemon=True)
                t.start()
                r.threads.append(t)
        failed, interrupted = _monitor(ranks, received, grace)
    except BaseException:
        _stop_all(ranks, grace)
        raise
    finally:
        for sig, h in old_handlers.items():
            signal.signal(sig, h)
    for r in ranks:
        for t in r.threads:
            t.join(timeout=2.0)  # a grandchild may hold the pipe open; do not hang on it

    if interrupted is not None:
        name = signal.Signals(interrupted).name
        _write(err, f"interlink run: received {name}, stopped all {len(ranks)} local ranks\n")
        return 128 + int(interrupted)
    if failed is not None:
        code = failed.proc.returncode
        others = [r.rank for r in ranks if r is not failed]
        lines = [f"interlink run: rank {failed.rank} {_describe_status(code)} (first failure)"
                 + (f"; stopped ranks {others}" if others else "")]
        if failed.tail:
            lines.append(f"last {len(failed.tail)} lines of rank {failed.rank}'s stderr:")
            lines += [f"  {ln}" for ln in failed.tail]
        else:
            lines.append(f"rank {failed.rank} wrote nothing to stderr")
        _write(err, "\n".join(lines) + "\n")
        return _exit_status(code)
    return 0


def _exit_status(code: int) -> int:
    """The launcher's exit status for a failed child's return code: the code itself, or 128 + the signal
    number for a child killed by a signal."""
    return code if 0 < code < 256 else 128 + (-code if code < 0 else 1)


def _write(out: _Output, text: str) -> None:
    out.write_line(text.encode("utf-8", "replace"))


def _monitor(ranks: list[_Rank], received: list[int], grace: float) -> tuple[_Rank | None, int | None]:
    """Wait until every rank exits 0, one fails, or the launcher gets a signal; stop the rest."""
    while True:
        if received:
            # forward what the launcher got; a second signal skips the grace period
            _stop_all(ranks, grace, first=received[0], hurry=lambda: len(received) > 1)
            return None, received[0]
        running = 0
        for r in ranks:
            code = r.proc.poll()
            if code is None:
                running += 1
            elif code != 0:
                _stop_all(ranks, grace)
                return r, None
        if running == 0:
            return None, None
        time.sleep(_POLL)


def _stop_all(ranks: list[_Rank], grace: float, first: int = signal.SIGTERM,
              hurry: Callable[[], bool] = lambda: False) -> None:
    """Signal every rank's process group (SIGTERM unless ``first`` says otherwise), SIGKILL after
    ``grace`` seconds, reap every rank."""
    for r in ranks:
        _signal_group(r.proc.pid, first)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not hurry() and any(r.proc.poll() is None for r in ranks):
        time.sleep(_POLL)
    for r in ranks:
        # also catches what a rank left behind in its group after it exited itself
        _signal_group(r.proc.pid, signal.SIGKILL)
    for r in ranks:
        try:
            r.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass
