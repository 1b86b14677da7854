"""The host page's doorbell: a rank about to sleep stores its sleeping flag and then loads the words it waits
for; a peer stores what it publishes and then loads that flag. Each side needs a full fence between its store
and its load (transport.futex.fence), or both may read the old values and the sleeper misses its wake-up
(it sleeps its whole timeout)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

from interlink.transport import futex, shm

pytestmark = pytest.mark.skipif(not futex.available, reason="Linux futexes")


def test_the_doorbell_handshake_fences(monkeypatch) -> None:
    """set_sleeping(True) fences after the flag is stored; ring() fences before it reads the flag."""
    page, fd = shm.HostPage.create(2, 0)
    os.close(fd)
    mine, peer = shm.Bell(page, 0), shm.Bell(page, 0)
    seen: list[tuple[str, int]] = []
    monkeypatch.setattr(futex, "fence", lambda: seen.append(("fence", int(page.words[mine.flag]))))
    mine.set_sleeping(True)
    assert seen == [("fence", 1)]  # the flag was stored when the fence ran
    reads = []

    class Words:  # records when the ringer reads the flag, against the fences before it
        def __getitem__(self, i):  # noqa: ANN001, ANN204
            reads.append(len(seen))
            return page.words[i]

        def __setitem__(self, i, v) -> None:  # noqa: ANN001
            page.words[i] = v

    peer.words = Words()
    before = int(page.words[mine.i])
    peer.ring()
    assert len(seen) == 2 and reads and reads[0] == 2  # fenced before the flag was read
    assert int(page.words[mine.i]) == before + 1  # the flag was set: the bell moved
    mine.set_sleeping(False)
    assert len(seen) == 2  # clearing the flag needs no fence


def _ringer(fd: int, n: int) -> None:
    page = shm.HostPage.attach(fd, 2, 0)
    bell = shm.Bell(page, 0)
    for k in range(1, n + 1):
        while int(page.words[bell.flag]) == 0 and k % 2:  # every other post waits until the owner sleeps
            time.sleep(0)
        page.done[1] = k  # rank 1's done word: what the owner waits for
        bell.ring()
        while int(page.done[0]) < k:  # the owner took it
            time.sleep(0)


def test_every_post_wakes_the_sleeper() -> None:
    """Two processes: the owner sleeps on its bell (0.5 s timeout) until the peer's counter moves; the peer posts
    400 times, half of them while the owner sleeps. Every wake-up arrives: no sleep lasts its timeout."""
    n = 400
    page, fd = shm.HostPage.create(2, 0)
    bell = shm.Bell(page, 0)
    p = mp.get_context("fork").Process(target=_ringer, args=(fd, n))
    p.start()
    longest = 0.0
    try:
        for k in range(1, n + 1):
            while int(page.done[1]) < k:
                snap = bell.snapshot()
                bell.set_sleeping(True)
                try:
                    if int(page.done[1]) < k:
                        t0 = time.monotonic()
                        bell.sleep(snap, 0.5)
                        longest = max(longest, time.monotonic() - t0)
                finally:
                    bell.set_sleeping(False)
            page.done[0] = k
    finally:
        p.join(30)
        os.close(fd)
    assert p.exitcode == 0
    assert longest < 0.4, f"a sleep lasted {longest:.3f} s: a wake-up was lost"
