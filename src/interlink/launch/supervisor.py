"""One supervisor for every launcher: children in their own process groups, prefixed output, the first
failure stops the rest, the launcher's own signals are forwarded.

Used by :func:`interlink.launch.local.launch` (the ranks of one node) and
:func:`interlink.launch.netns.launch_emulated` (one node launcher per emulated host). A child is any
object with a ``proc`` (``subprocess.Popen``) and an ``also_failed`` flag.

Every child runs in its own process group (a new session), so that it and whatever it spawned are
stopped together with ``killpg``: SIGTERM first (or the SIGINT/SIGHUP the launcher itself received,
forwarded), SIGKILL after a grace period. On Linux the children also get SIGKILL should the launcher
itself die (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, BinaryIO, Callable, Sequence

DEFAULT_GRACE = 3.0
POLL = 0.05
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def death_signal_preexec():
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


class Output:
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


def pump(pipe: BinaryIO, prefix: bytes, out: Output, tail: collections.deque | None) -> None:
    with pipe:
        for line in iter(pipe.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            out.write_line(prefix + line)
            if tail is not None:
                tail.append(line.decode("utf-8", "replace").rstrip("\n"))


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def describe_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def exit_status(code: int) -> int:
    """The launcher's exit status for a failed child's return code: the code itself, or 128 + the signal
    number for a child killed by a signal."""
    return code if 0 < code < 256 else 128 + (-code if code < 0 else 1)


def write(out: Output, text: str) -> None:
    out.write_line(text.encode("utf-8", "replace"))


def monitor(children: Sequence[Any], received: list, grace: float, extra: float = 0.0) -> tuple[Any, Any]:
    """Wait until every child exits 0, one fails, or the launcher gets a signal (``received``, filled
    by :class:`Signals`); stop the rest. Returns (the first child that failed, or None; the signal
    received, or None). Children that failed on their own before being told to stop are marked
    ``also_failed``."""
    while True:
        if received:
            # forward what the launcher got; a second signal skips the grace period
            stop_all(children, grace, first=received[0], hurry=lambda: len(received) > 1, extra=extra)
            return None, received[0]
        running = 0
        for c in children:
            code = c.proc.poll()
            if code is None:
                running += 1
            elif code != 0:
                for other in children:
                    if other is not c and other.proc.poll() not in (None, 0):
                        other.also_failed = True
                stop_all(children, grace, hurry=lambda: len(received) > 1, extra=extra)
                return c, None
        if running == 0:
            return None, None
        time.sleep(POLL)


def stop_all(children: Sequence[Any], grace: float, first: int = signal.SIGTERM,
             hurry: Callable[[], bool] = lambda: False, extra: float = 0.0) -> None:
    """Signal every child's process group (SIGTERM unless ``first`` says otherwise), SIGKILL after
    ``grace`` (+ ``extra``: a child that is itself a launcher needs its own grace first) seconds, reap
    every child."""
    for c in children:
        signal_group(c.proc.pid, first)
    deadline = time.monotonic() + grace + extra
    while time.monotonic() < deadline and not hurry() and any(c.proc.poll() is None for c in children):
        time.sleep(POLL)
    for c in children:
        # also catches what a child left behind in its group after it exited itself
        signal_group(c.proc.pid, signal.SIGKILL)
    for c in children:
        try:
            c.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass


class Signals:
    """While active (a context manager, main thread only), SIGINT/SIGTERM/SIGHUP are recorded in
    ``received`` instead of killing the launcher; ``on_first`` is called with the first one (to abort a
    set-up still in progress)."""

    def __init__(self, on_first: Callable[[int], None] | None = None) -> None:
        self.received: list[int] = []
        self.on_first = on_first
        self._old: dict = {}

    def _handle(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if self.on_first is not None and len(self.received) == 1:
            self.on_first(signum)

    def __enter__(self) -> "Signals":
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                try:
                    self._old[sig] = signal.signal(sig, self._handle)
                except (ValueError, OSError):
                    pass
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, h in self._old.items():
            signal.signal(sig, h)


def start_pumps(proc: subprocess.Popen, prefix: bytes, out: "Output", err: "Output",
                tail: collections.deque | None, name: str) -> list:
    """Threads that copy the child's stdout and stderr, line by line with ``prefix``, to ``out`` and
    ``err`` (the stderr lines also to ``tail``)."""
    threads = []
    for pipe, sink, tl in ((proc.stdout, out, None), (proc.stderr, err, tail)):
        t = threading.Thread(target=pump, args=(pipe, prefix, sink, tl), name=f"{name}-io", daemon=True)
        t.start()
        threads.append(t)
    return threads
