"""The runner's order and the waiter's help (runtime/work.py): a thread waiting for a queued point-to-point
job runs the batch at the head of the queue itself (no hop to the runner thread and back), only when the
runner has nothing in flight, with the jobs' callbacks seeing the runner's context; never out of order."""

from __future__ import annotations

import threading

from interlink.runtime.work import Runner


class _NoThread:
    """Stands in for the runner's worker so that submit() starts none: the test decides who runs what."""


def _runner() -> tuple[Runner, list]:
    ran: list = []

    def batch(jobs: list) -> None:
        ran.append(([j.p2p for j in jobs], threading.current_thread().name))
        for j in jobs:
            j.work._finish(j.p2p)

    r = Runner(batch)
    r._thread = _NoThread()  # type: ignore[assignment]
    return r, ran


def test_a_waiter_runs_the_queued_batch_itself():
    r, ran = _runner()
    a = r.submit(None, "send", p2p="send")
    b = r.submit(None, "recv", p2p="recv")
    assert a.wait(timeout=5) and b.wait(timeout=5)  # no runner thread exists: only the waiter could run them
    assert ran == [(["send", "recv"], threading.current_thread().name)]  # one batch: progressed together
    assert r._pending == 0 and not r._q
    assert a.result() == "send" and b.result() == "recv"


def test_the_waiter_never_overtakes_a_job_the_runner_has_taken():
    r, ran = _runner()
    seen: list = []
    first = r.submit(lambda: seen.append("collective"), "all_reduce")  # not point to point
    job = r._q.popleft()  # the runner took it and is about to run it (pending 1, queue empty)
    w = r.submit(None, "send", p2p="send")
    r.help()
    assert ran == [] and not w.is_completed()  # the send waits for the collective before it
    job.work._finish(job.fn())  # the runner runs it
    r._done(1)
    r.help()
    assert seen == ["collective"] and ran and w.wait(timeout=5) and first.is_completed()


def test_the_waiter_does_not_help_behind_a_queued_collective_or_while_the_runner_runs():
    r, ran = _runner()
    r.submit(lambda: None, "all_reduce")
    w = r.submit(None, "send", p2p="send")
    r.help()  # the head of the queue is a collective: the runner's to run, in order
    assert ran == [] and not w.is_completed()
    r2, ran2 = _runner()
    w2 = r2.submit(None, "send", p2p="send")
    with r2._exec:  # the runner is running something
        r2.help()
    assert ran2 == [] and not w2.is_completed()
    r2.help()
    assert w2.wait(timeout=5)


def test_callbacks_of_a_helped_batch_run_as_on_the_runner():
    """A collective called from a done-callback runs inline there, as on the runner thread (the call order
    is the same on every rank): the helping thread counts as the runner while it runs the batch."""
    r, _ = _runner()
    w = r.submit(None, "recv", p2p="recv")
    inside: list = []
    w.add_done_callback(lambda _w: inside.append(r.on_runner()))
    assert w.wait(timeout=5)
    assert inside == [True] and not r.on_runner()


def test_a_real_runner_still_serves_waiters_and_helpers_alike():
    """With the worker thread running, whoever takes a batch first runs it; every job completes in order."""
    out: list = []

    def batch(jobs: list) -> None:
        for j in jobs:
            out.append(j.p2p)
            j.work._finish()

    r = Runner(batch)
    try:
        works = []
        for i in range(200):
            works.append(r.submit(None, f"op {i}", p2p=i))
            if i % 3 == 0:
                works.append(r.submit(lambda i=i: out.append(f"c{i}"), f"coll {i}"))
            if i % 7 == 0:
                works[-1].wait(timeout=5)
        for w in works:
            assert w.wait(timeout=5)
        expect = []
        for i in range(200):
            expect.append(i)
            if i % 3 == 0:
                expect.append(f"c{i}")
        assert out == expect
    finally:
        r.stop()


def test_help_is_harmless_once_the_work_is_done():
    r, ran = _runner()
    w = r.submit(None, "send", p2p="send")
    assert w.wait(timeout=5) and w.wait(timeout=5)
    assert len(ran) == 1
