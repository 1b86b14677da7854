"""The life of a job: init after destroy in one process, a rank that never arrives, a stranger refused."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import numpy as np

from mp import free_port, run_ranks


def _reinit(rank: int, world: int, rounds: int) -> list:
    import interlink as dist

    sums = []
    for i in range(rounds):
        dist.init(timeout=30, init_timeout=20)
        x = np.full(5, float(rank + i), np.float32)
        dist.all_reduce(x)
        sums.append(float(x[0]))
        dist.destroy()
    return sums


def test_init_after_destroy_in_one_process() -> None:
    """torch users re-init in test suites and notebooks: rank 1 may re-init while rank 0's store of the
    previous init is still shutting down (it must retry, not fail to authenticate)."""
    for _ in range(3):
        res = run_ranks(3, _reinit, 4, timeout=120)
        for r in range(3):
            assert res[r] == [float(sum(q + i for q in range(3))) for i in range(4)], res


_JOIN = r"""
import time, interlink as dist
t = time.time()
try:
    dist.init(timeout=30, init_timeout=3)
    print("joined")
except Exception as e:
    print(f"{type(e).__name__} after {time.time() - t:.1f}s ranks={list(getattr(e, 'ranks', ()))}: {e}")
"""


def test_a_rank_that_never_arrives_is_named(tmp_path) -> None:
    script = tmp_path / "join.py"
    script.write_text(_JOIN)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="3",
               INTERLINK_SECRET="s", INTERLINK_JOIN_REPORT_S="1")
    p0 = subprocess.Popen([sys.executable, str(script)], env=dict(env, RANK="0"), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    p1 = subprocess.Popen([sys.executable, str(script)], env=dict(env, RANK="1"), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    out0, err0 = p0.communicate(timeout=60)
    p1.communicate(timeout=60)
    assert "CommTimeoutError" in out0 and "ranks=[2]" in out0 and "never joined" in out0, out0
    assert "waiting for ranks [2] to join (2 of 3 joined" in err0, err0  # said while waiting, not after


def test_a_wrong_secret_is_named_by_the_side_that_refuses(caplog) -> None:
    import pytest

    from interlink.errors import AuthenticationError
    from interlink.runtime.store import StoreClient, StoreServer

    server = StoreServer("127.0.0.1", 0, b"right secret 0123456789")
    try:
        with caplog.at_level(logging.WARNING, logger="interlink"):
            with pytest.raises(AuthenticationError, match="secrets differ"):
                StoreClient("127.0.0.1", server.port, b"wrong secret 0123456789", 5.0, 2.0, name="rank 1 gen 1")
            deadline = time.monotonic() + 5
            while "refused a connection" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
        assert "refused a connection" in caplog.text and "rank 1" in caplog.text, caplog.text
    finally:
        server.close()
