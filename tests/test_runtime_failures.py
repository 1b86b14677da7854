"""Failures give every rank a typed error naming op, group, sequence number and ranks, within
seconds; bad arguments fail before any byte moves; nothing leaks."""

from __future__ import annotations

import os
import signal
import socket
import time

import numpy as np
import pytest

from mp import run_ranks


def _err(e: BaseException) -> dict:
    return {"type": type(e).__name__, "msg": str(e), "op": getattr(e, "op", None),
            "group": getattr(e, "group", None), "seq": getattr(e, "seq", None),
            "ranks": list(getattr(e, "ranks", ()))}


# ---- a rank dies mid-collective -------------------------------------------------------------

def die_midway(rank: int, world: int) -> dict:
    import interlink as dist

    dist.init(timeout=60)
    a = np.ones(1 << 16, dtype=np.float32)
    dist.all_reduce(a)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t = time.monotonic()
    try:
        for _ in range(3):
            dist.all_reduce(a)
    except Exception as e:
        out = _err(e)
        out["elapsed"] = time.monotonic() - t
        return out
    return {"type": None}


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("nranks", [2, 4])
def test_dead_rank_raises_peer_lost_within_seconds(nranks: int, transport: str) -> None:
    shm_before = set(os.listdir("/dev/shm"))
    res = run_ranks(nranks, die_midway, env={"INTERLINK_TRANSPORT": transport}, expect_dead=(1,), timeout=60)
    for r, out in enumerate(res):
        if r == 1:
            continue
        assert out["type"] == "PeerLostError", out
        assert out["elapsed"] < 5.0, out
        assert out["op"] == "all_reduce" and out["group"] == "world" and out["seq"] == 2, out
        assert "rank 1" in out["msg"], out
    # memfd-backed rings: nothing is ever named in /dev/shm, so nothing can leak
    assert set(os.listdir("/dev/shm")) - shm_before == set()


# ---- mismatched collectives ----------------------------------------------------------------

def mismatch(rank: int, world: int, kind: str) -> dict:
    import interlink as dist

    dist.init(timeout=30)
    try:
        if kind == "count":
            dist.all_reduce(np.ones(10 + 2 * rank, dtype=np.float32))
        elif kind == "dtype":
            dist.all_reduce(np.ones(10, dtype=np.float32 if rank == 0 else np.float64))
        elif kind == "op":
            dist.all_reduce(np.ones(10), op="sum" if rank == 0 else "max")
        elif kind == "collective":
            if rank == 0:
                dist.broadcast(np.ones(10), src=0)
            else:
                dist.all_reduce(np.ones(10))
        elif kind == "root":
            dist.broadcast(np.ones(1000), src=rank % 2)
        elif kind == "path":  # rank 0 small (shared-page fast path), the others large (channels)
            dist.all_reduce(np.ones(10 if rank == 0 else 50_000, dtype=np.float32))
        elif kind == "order":  # the same two calls in a different order
            a, b = np.ones(4), np.ones(4)
            if rank == 0:
                dist.all_reduce(a)
                dist.broadcast(b, src=0)
            else:
                dist.broadcast(b, src=0)
                dist.all_reduce(a)
    except Exception as e:
        return _err(e)
    # a rank whose part completed (a broadcast root's sends are buffered) learns at its next call
    try:
        dist.barrier()
        return {"type": None}
    except Exception as e:
        out = _err(e)
        out["next_call"] = True
        return out


@pytest.mark.parametrize("fast", ["1", "0"])
@pytest.mark.parametrize("kind", ["count", "dtype", "op", "collective", "root", "path", "order"])
def test_mismatch_raises_on_every_rank(kind: str, fast: str) -> None:
    res = run_ranks(3, mismatch, kind, timeout=60, env={"INTERLINK_FAST": fast})
    for out in res:
        assert out["type"] == "CollectiveMismatchError", res
        assert out["seq"] == (2 if out.get("next_call") else 1) and out["group"] == "world", out
    # the rank that detected it names both sides
    detail = [o["msg"] for o in res if "but rank" in o["msg"]]
    assert detail, res
    assert "called" in detail[0] and "sent" in detail[0]


# ---- a peer that never arrives -------------------------------------------------------------

def late(rank: int, world: int) -> dict:
    import interlink as dist

    dist.init(timeout=30)
    dist.barrier()
    if rank == 2:
        time.sleep(6)
        return {"type": None}
    t = time.monotonic()
    try:
        dist.all_reduce(np.ones(4), timeout=2.0)
    except Exception as e:
        out = _err(e)
        out["elapsed"] = time.monotonic() - t
        return out
    return {"type": None}


def test_timeout_names_op_group_seq_and_missing_rank() -> None:
    res = run_ranks(3, late, timeout=60)
    for r in (0, 1):
        out = res[r]
        assert out["type"] in ("CommTimeoutError", "PeerLostError"), out
    timed = [o for o in res[:2] if o["type"] == "CommTimeoutError"]
    assert timed, res
    o = timed[0]
    assert o["op"] == "all_reduce" and o["group"] == "world" and o["seq"] == 2, o
    assert 2 in o["ranks"] or 1 in o["ranks"], o
    assert o["elapsed"] < 5, o
    assert "last" in o["msg"] and "barrier" in o["msg"], o  # the flight recorder


# ---- bad arguments: errors before any byte moves ---------------------------------------------

def bad_args(rank: int, world: int) -> list:
    import interlink as dist

    dist.init(timeout=30)
    errors = []
    if rank == 0:
        cases = [
            lambda: dist.all_reduce(np.ones((4, 4))[:, 0]),  # non-contiguous
            lambda: dist.all_reduce(np.ones(4), op="band"),  # BAND on float
            lambda: dist.all_reduce(np.ones(4), op="median"),  # unknown op
            lambda: dist.all_gather_into_tensor(np.empty(5), np.ones(3)),  # size mismatch
            lambda: dist.reduce_scatter_tensor(np.empty(2, np.float32), np.ones(4)),  # dtype mismatch
            lambda: dist.broadcast(np.ones(3), src=world),  # rank out of range
            lambda: dist.all_reduce(np.frombuffer(b"abcd", dtype=np.uint8)),  # read-only
            lambda: dist.all_reduce([1, 2, 3]),  # not an array
            lambda: dist.all_to_all_single(np.empty(4), np.ones(4), input_split_sizes=[1, 1]),
        ]
        for c in cases:
            try:
                c()
                errors.append("no error")
            except (ValueError, TypeError) as e:
                errors.append(type(e).__name__ + ": " + str(e))
    # nothing moved: the next real collective matches on both ranks
    a = np.full(3, rank + 1.0)
    dist.all_reduce(a)
    assert (a == 3.0).all(), a
    dist.destroy()
    return errors


def test_bad_arguments_fail_before_any_byte_moves() -> None:
    res = run_ranks(2, bad_args, timeout=60)
    errs = res[0]
    assert len(errs) == 9 and "no error" not in errs, errs
    assert "contiguous" in errs[0] and "BAND" in errs[1] and "unknown reduce op" in errs[2]
    assert "out of range" in errs[5] and "read-only" in errs[6]


# ---- an unauthenticated connection is refused, the job goes on ------------------------------

def intruder(rank: int, world: int) -> dict:
    import interlink as dist
    from interlink.errors import AuthenticationError
    from interlink.runtime.rendezvous import StoreClient

    dist.init(timeout=30)
    refused = None
    if rank == 1:
        port = int(os.environ["MASTER_PORT"])
        # garbage on the store port
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n" * 10)
        s.close()
        # a client holding the wrong secret
        try:
            StoreClient("127.0.0.1", port, b"wrong secret", timeout=5, connect_timeout=5)
            refused = False
        except AuthenticationError:
            refused = True
    a = np.full(5, float(rank))
    dist.all_reduce(a)
    dist.barrier()
    dist.destroy()
    return {"refused": refused, "sum": a.tolist()}


def test_unauthenticated_connection_refused_job_continues() -> None:
    res = run_ranks(2, intruder, timeout=60)
    assert res[1]["refused"] is True
    assert res[0]["sum"] == [1.0] * 5 and res[1]["sum"] == [1.0] * 5
