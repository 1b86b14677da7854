"""What torch.distributed users call besides the tensor collectives: object collectives, the list forms
of all_to_all and reduce_scatter, batch_isend_irecv / P2POp, monitored_barrier, rank maps, dir()."""

from __future__ import annotations

import numpy as np
import pytest

from mp import run_ranks


def _suite(rank: int, world: int) -> list:
    import interlink as dist

    dist.init(timeout=30)
    p = world
    fails: list = []

    def check(what, ok):
        if not ok:
            fails.append(f"rank {rank}: {what}")

    objs: list = [None] * p
    mine = {"rank": rank, "payload": list(range(rank * 7))}  # sizes differ per rank
    dist.all_gather_object(objs, mine)
    check("all_gather_object", objs == [{"rank": r, "payload": list(range(r * 7))} for r in range(p)])
    root = p - 1
    got = [None] * p if rank == root else None
    dist.gather_object(("x", rank), got, dst=root)
    check("gather_object", got == [("x", r) for r in range(p)] if rank == root else got is None)
    lst = [f"from {rank}", rank, None] if rank == root else [None, None, None]
    dist.broadcast_object_list(lst, src=root)
    check("broadcast_object_list", lst == [f"from {root}", root, None])
    out = [None]
    dist.scatter_object_list(out, [{"to": r} for r in range(p)] if rank == 0 else None, src=0)
    check("scatter_object_list", out == [{"to": rank}])
    # all_to_all list form, uneven sizes: rank i sends (i + j + 1) elements to rank j
    ins = [np.full(rank + j + 1, 100 * rank + j, np.float32) for j in range(p)]
    outs = [np.zeros(i + rank + 1, np.float32) for i in range(p)]
    dist.all_to_all(outs, ins)
    check("all_to_all list", all(np.array_equal(outs[i], np.full(i + rank + 1, 100 * i + rank, np.float32))
                                 for i in range(p)))
    # reduce_scatter list form
    o = np.zeros(5, np.int64)
    dist.reduce_scatter(o, [np.full(5, r * 10 + rank, np.int64) for r in range(p)])
    check("reduce_scatter list", np.array_equal(o, np.full(5, sum(rank * 10 + q for q in range(p)))))
    # batch_isend_irecv around the ring
    if p > 1:
        nxt, prv = (rank + 1) % p, (rank - 1) % p
        buf = np.zeros(33, np.float64)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, np.full(33, float(rank)), nxt),
                                        dist.P2POp(dist.irecv, buf, prv)])
        for w in reversed(works):
            w.wait()
        check("batch_isend_irecv", np.array_equal(buf, np.full(33, float(prv))))
    # rank maps on a subgroup
    sub = dist.new_group([q for q in range(p) if q % 2 == 0])
    if rank % 2 == 0:
        check("get_process_group_ranks", dist.get_process_group_ranks(sub) == [q for q in range(p) if q % 2 == 0])
        check("get_global_rank", dist.get_global_rank(sub, len(sub.ranks) - 1) == sub.ranks[-1])
        check("get_group_rank", dist.get_group_rank(sub, rank) == rank // 2)
    dist.monitored_barrier()
    dist.destroy()
    return fails


@pytest.mark.parametrize("nranks", [1, 3, 4])
def test_torch_like_calls(nranks: int) -> None:
    res = run_ranks(nranks, _suite, timeout=120)
    assert res == [[]] * nranks, res


def _torch_lists(rank: int, world: int) -> list:
    import torch

    import interlink as dist

    dist.init(timeout=30)
    ins = [torch.full((rank + j + 1,), float(10 * rank + j)) for j in range(world)]
    outs = [torch.zeros(i + rank + 1) for i in range(world)]
    w = dist.all_to_all(outs, ins, async_op=True)
    w.wait()
    ok = all(torch.equal(outs[i], torch.full((i + rank + 1,), float(10 * i + rank))) for i in range(world))
    dist.destroy()
    return [] if ok else [f"rank {rank}: {outs}"]


def test_all_to_all_list_of_torch_tensors_async() -> None:
    pytest.importorskip("torch")
    res = run_ranks(3, _torch_lists, timeout=120)
    assert res == [[]] * 3, res


def _late(rank: int, world: int) -> dict:
    import time

    import interlink as dist

    dist.init(timeout=30)
    if rank == world - 1:
        time.sleep(4)  # arrives after the others' timeout
        dist.destroy()
        return {}
    t = time.monotonic()
    try:
        dist.monitored_barrier(timeout=1.5)
        return {"raised": None}
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "ranks": list(getattr(e, "ranks", ())), "after": time.monotonic() - t}


def test_monitored_barrier_names_the_missing_rank() -> None:
    res = run_ranks(3, _late, timeout=60)
    for r in (0, 1):
        assert res[r]["raised"] in ("CommTimeoutError", "PeerLostError"), res
    assert any(res[r]["raised"] == "CommTimeoutError" and 2 in res[r]["ranks"] for r in (0, 1)), res


def test_dir_lists_the_api_before_first_use() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import interlink; print(' '.join(dir(interlink)))"],
                         capture_output=True, text=True, check=True).stdout.split()
    for name in ("init", "all_reduce", "batch_isend_irecv", "all_gather_object", "empty", "ReduceOp"):
        assert name in out, out


def _any_source(rank: int, world: int) -> dict:
    import numpy as np

    import interlink as dist

    dist.init()
    got: dict = {}
    if rank == 0:
        for _ in range(2 * (world - 1)):
            buf = np.zeros(4099, dtype=np.float32)
            src = dist.recv(buf, tag=3)  # any source
            assert np.all(buf == buf[0]), buf[:4]
            got.setdefault(src, []).append(float(buf[0]))
        w = dist.irecv(np.zeros(5, dtype=np.int64), tag=4)
        w.wait()
        got["irecv_source"] = w.result()
        dist.send(np.zeros(1), dst=1, tag=9)  # now rank 1 sends its odd one
        try:  # rank 1's last message has 8 elements, not 7: a mismatch naming it, not a wait or a wrong result
            dist.recv(np.zeros(7, dtype=np.float32), tag=3)
            got["mismatch"] = "none"
        except dist.CollectiveMismatchError as e:
            got["mismatch"] = str(e)
        return got
    dist.send(np.full(4099, 10.0 * rank, dtype=np.float32), dst=0, tag=3)
    dist.send(np.full(4099, 10.0 * rank + 1, dtype=np.float32), dst=0, tag=3)
    if rank == world - 1:
        dist.send(np.arange(5), dst=0, tag=4)
    if rank == 1:
        dist.recv(np.zeros(1), src=0, tag=9)
        dist.send(np.zeros(8, dtype=np.float32), dst=0, tag=3)
    return got


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_recv_from_any_source(transport: str) -> None:
    """recv(src=None): every sender's messages arrive, each sender's in its order; a message that does not
    fit (another size) is a mismatch naming both ranks, not a wrong result."""
    res = run_ranks(3, _any_source, env={"INTERLINK_TRANSPORT": transport}, timeout=120, expect_dead=(1,))
    got = res[0]
    assert got[1] == [10.0, 11.0] and got[2] == [20.0, 21.0] and got["irecv_source"] == 2, got
    assert "op=recv" in got["mismatch"] and "ranks=[0, 1]" in got["mismatch"] and "n=8" in got["mismatch"], got


def _eager(rank: int, world: int) -> dict:
    import time

    import numpy as np

    import interlink as dist
    from interlink.runtime.policy import cma_threshold

    dist.init(timeout=30)
    big = cma_threshold() // 4 + 3  # float32 elements: past the one-copy threshold (odd size)
    out: dict = {}
    if rank == 0:
        for n in (1, 2, 4099, big):
            t = time.monotonic()
            dist.send(np.arange(n, dtype=np.float32) + n, dst=1, tag=n % 7)
            out[n] = time.monotonic() - t
        return out
    time.sleep(1.0)  # rank 0's small sends must not wait for these receives
    for n in (1, 2, 4099, big):
        buf = np.zeros(n, dtype=np.float32)
        dist.recv(buf, src=0, tag=n % 7)
        out[n] = bool(np.array_equal(buf, np.arange(n, dtype=np.float32) + n))
    return out


def test_small_sends_are_eager_and_large_ones_arrive_by_one_copy() -> None:
    """A blocking send below the cross-memory threshold (policy INTERLINK_CMA_MIN_BYTES) goes through the
    ring and returns before the receiver posts its receive (as MPI's eager sends); from the threshold on
    the receiver reads the sender's buffer in place, so that send returns once it is read. Every message
    arrives intact. (Point-to-point sends once asked for the one-copy path from 1 byte: every send waited
    for its receiver.)"""
    res = run_ranks(2, _eager, timeout=120)
    sent, got = res[0], res[1]
    assert all(got.values()), got
    small = [n for n in sent if n != max(sent)]
    assert all(sent[n] < 0.5 for n in small), sent  # did not wait for the receiver's 1 s sleep
    assert sent[max(sent)] > 0.5, sent  # the one-copy send waited for the receiver to read it
