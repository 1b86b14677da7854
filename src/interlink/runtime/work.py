"""Async handles and the per-process runner that keeps operations in call order.

Collectives must run in the same order on every rank, so one runner per process executes them in
submission order. A synchronous call runs inline on the caller's thread when nothing is queued (no
thread hop on the latency path); otherwise it queues behind the pending async work and waits.
Consecutive point-to-point operations are progressed together, so isend/irecv pairs cannot deadlock. A
thread that waits for a queued point-to-point job runs that batch itself when the runner has nothing in
flight (:meth:`Runner.help`): the same batch, in the same order, without the hop to the runner thread.

A Work's done-callbacks (:meth:`Work.add_done_callback`: the torch backend completes torch Futures with
them) run on the thread that finished it: the runner, right after the operation and before the next
one. A collective called from such a callback runs inline there, so it takes the same place in the call
order on every rank (as NCCL's inline-completed futures do); waiting there for work still queued would
deadlock, and raises instead.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable, Optional

from ..errors import CommTimeoutError

log = logging.getLogger("interlink")


class Work:
    """Handle of an async operation (torch.distributed's Work)."""

    def __init__(self, desc: str = "") -> None:
        self.desc = desc
        self._done = threading.Event()
        self._exc: Optional[BaseException] = None
        self._result: Any = None
        self._callbacks: Optional[list] = None
        self._lock = threading.Lock()
        self._runner: Optional["Runner"] = None  # a queued point-to-point job's runner (Runner.help)

    def _finish(self, result: Any = None, exc: Optional[BaseException] = None) -> None:
        self._result = result
        self._exc = exc
        with self._lock:
            self._done.set()
            cbs, self._callbacks = self._callbacks, None
        for cb in cbs or ():
            try:
                cb(self)
            except Exception:  # noqa: BLE001 - a callback's failure is its own; the work is done
                log.exception("interlink: a done-callback of %s raised", self.desc)

    def add_done_callback(self, fn: Callable[["Work"], Any]) -> None:
        """Call ``fn(work)`` once the work is done (at once, on this thread, when it already is); else on
        the thread that finishes it, in the order added."""
        with self._lock:
            if not self._done.is_set():
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)

    def is_completed(self) -> bool:
        return self._done.is_set()

    def is_success(self) -> bool:
        return self._done.is_set() and self._exc is None

    def exception(self) -> Optional[BaseException]:
        return self._exc

    def wait(self, timeout: Optional[float] = None) -> bool:
        if not self._done.is_set() and _RUNNER_THREAD.get(threading.get_ident()) is not None:
            raise RuntimeError(f"waiting for {self.desc} inside a completion callback on interlink's runner "
                               "thread would deadlock (it runs after this callback returns)")
        runner = self._runner
        if runner is not None and not self._done.is_set():
            runner.help()  # run the queued point-to-point batch here if the runner has not started it
        if not self._done.wait(timeout):
            raise CommTimeoutError(f"{self.desc} did not complete within {timeout} s")
        if self._exc is not None:
            raise self._exc
        return True

    def result(self) -> Any:
        self.wait()
        return self._result

    def get_future(self):  # minimal torch-compatible future
        from concurrent.futures import Future

        fut: Future = Future()

        def waiter() -> None:
            self._done.wait()
            if self._exc is not None:
                fut.set_exception(self._exc)
            else:
                fut.set_result(self._result)

        threading.Thread(target=waiter, daemon=True).start()
        return fut


_RUNNER_THREAD: dict[int, "Runner"] = {}  # thread ident -> the Runner whose worker it is


class _Job:
    __slots__ = ("fn", "work", "p2p")

    def __init__(self, fn: Callable[[], Any], work: Work, p2p: Any) -> None:
        self.fn = fn
        self.work = work
        self.p2p = p2p  # for p2p jobs: a callable returning the job's ops, else None


class Runner:
    """Executes jobs in submission order on a worker thread (async) or inline (sync)."""

    def __init__(self, run_p2p_batch: Callable[[list], None]) -> None:
        self._q: collections.deque[_Job] = collections.deque()
        self._cv = threading.Condition()
        self._exec = threading.Lock()
        self._pending = 0
        self._thread: Optional[threading.Thread] = None
        self._stop = False
        self._run_p2p_batch = run_p2p_batch

    def on_runner(self) -> bool:
        """True on this runner's worker thread (in a done-callback): calls run inline there."""
        return _RUNNER_THREAD.get(threading.get_ident()) is self

    def run_sync(self, fn: Callable[[], Any], desc: str) -> Any:
        if self.on_runner():
            return fn()
        with self._cv:
            idle = self._pending == 0
        if idle:
            with self._exec:
                return fn()
        w = self.submit(fn, desc)
        return w.result()

    def run_sync_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """run_sync without building a closure (the latency path)."""
        if self._pending == 0:  # read without the lock: a stale non-zero only takes the slow path
            with self._exec:
                if self._pending == 0:
                    return fn(*args)
        return self.run_sync(lambda: fn(*args), "call")

    def submit(self, fn: Callable[[], Any], desc: str, p2p: Any = None) -> Work:
        w = Work(desc)
        if p2p is None and self.on_runner():  # from a done-callback: in order, right here
            try:
                res = fn()
            except BaseException as e:  # delivered to wait()
                w._finish(exc=e)
            else:
                w._finish(res)
            return w
        if p2p is not None:
            w._runner = self
        with self._cv:
            self._q.append(_Job(fn, w, p2p))
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="interlink-runner", daemon=True)
                self._thread.start()
            self._cv.notify()
        return w

    def help(self) -> None:
        """A thread waiting for a queued point-to-point job runs the batch at the head of the queue itself,
        as the runner would (the same ops, engine and errors; the jobs' done-callbacks on this thread, which
        counts as the runner's while it runs them), instead of waking the runner thread and being woken
        back: an isend/irecv exchange of 4 bytes on 2 ranks 42 -> 24 us (benchmarks/RESULTS.md).
        Nothing is done unless the runner is idle (its lock free) and no job has left the queue without
        finishing, so the call order stays the queue's: jobs leave the queue only under the executor lock,
        which this holds while it runs the batch (and its feed takes the p2p jobs behind it)."""
        if self.on_runner() or not self._exec.acquire(blocking=False):
            return
        me = threading.get_ident()
        try:
            with self._cv:  # (an RLock: take_p2p takes it again)
                if self._pending != len(self._q) or not self._q or self._q[0].p2p is None:
                    return
                jobs = self.take_p2p()
            _RUNNER_THREAD[me] = self
            try:
                self._run_p2p_batch(jobs)
            finally:
                _RUNNER_THREAD.pop(me, None)
                self._done(len(jobs))
        finally:
            self._exec.release()

    def take_p2p(self) -> list:
        """Called by the engine while it waits: more queued p2p jobs to progress concurrently."""
        out = []
        with self._cv:
            while self._q and self._q[0].p2p is not None:
                out.append(self._q.popleft())
        return out

    def _done(self, n: int) -> None:
        with self._cv:
            self._pending -= n
            self._cv.notify_all()

    def _loop(self) -> None:
        _RUNNER_THREAD[threading.get_ident()] = self
        try:
            self._serve()
        finally:
            _RUNNER_THREAD.pop(threading.get_ident(), None)

    def _serve(self) -> None:
        # Jobs leave the queue only under the executor lock (here, in help() and in take_p2p, which the
        # lock's holder calls): a job popped before taking the lock could wait for it while a thread in
        # help() ran a p2p batch whose feed took the p2p jobs queued behind that job, ahead of it
        # (tests/test_runtime_runner_order.py).
        while True:
            with self._cv:
                while not self._q and not self._stop:
                    self._cv.wait()
                if self._stop and not self._q:
                    return
            with self._exec:
                with self._cv:
                    if not self._q:
                        continue  # help() ran it meanwhile
                    job = self._q.popleft()
                if job.p2p is not None:
                    jobs = [job] + self.take_p2p()
                    try:
                        self._run_p2p_batch(jobs)
                    finally:
                        self._done(len(jobs))
                    continue
                try:
                    try:
                        res = job.fn()
                    except BaseException as e:  # delivered to wait()
                        job.work._finish(exc=e)
                    else:
                        job.work._finish(res)
                finally:
                    self._done(1)

    def drain(self) -> None:
        with self._cv:
            while self._pending:
                self._cv.wait()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
