"""Buffer-protocol objects (bytearray, array.array, memoryview) as tensors of real collectives on real
processes, over shared memory and TCP, against numpy: results land in the caller's object itself."""

from __future__ import annotations

import array

import numpy as np
import pytest

from mp import run_ranks

SMALL, LARGE = 7, 70_001  # the one-shot shared page (<= 8 KiB) and the channels (many slots / TCP writes)


def vals(rank: int, n: int, dt, salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng([rank, n, salt])
    lo = 0 if np.dtype(dt).kind == "u" else -50
    return rng.integers(lo, 200, size=n).astype(dt)


def buffers(rank: int, world: int) -> dict:
    import interlink as dist

    from interlink.runtime import api

    dist.init(timeout=60)
    kinds = sorted({type(c).__name__ for c in api._CTX.engine.channels.values()})
    p = world
    fails: list[str] = []
    checks = 0

    def check(name: str, obj, dt, want: np.ndarray) -> None:
        nonlocal checks
        checks += 1
        got = np.frombuffer(memoryview(obj).cast("B"), dtype=dt)
        if got.shape != want.shape or not np.array_equal(got, want):
            fails.append(f"rank {rank} {name}: got {got[:6]} expected {want[:6]} (len {got.size} vs {want.size})")

    for n in (SMALL, LARGE):
        # bytearray (uint8): SUM wraps modulo 256 as numpy's does, BXOR, MAX
        for op, red in (("sum", lambda xs: np.sum(xs, axis=0, dtype=np.uint8)),
                        ("bxor", lambda xs: np.bitwise_xor.reduce(xs, axis=0)),
                        ("max", lambda xs: np.max(xs, axis=0))):
            ins = [vals(r, n, np.uint8, 1) for r in range(p)]
            b = bytearray(ins[rank].tobytes())
            dist.all_reduce(b, op=op)
            check(f"bytearray all_reduce {op} n={n}", b, np.uint8, red(np.stack(ins)))
        # array.array of doubles, int32, float32
        for code, dt, op in (("d", np.float64, "sum"), ("i", np.int32, "min"), ("f", np.float32, "max"),
                             ("q", np.int64, "sum")):
            ins = [vals(r, n, dt, 2) for r in range(p)]
            a = array.array(code, ins[rank].tolist())
            assert a.itemsize == np.dtype(dt).itemsize
            dist.all_reduce(a, op=op)
            want = {"sum": np.sum, "min": np.min, "max": np.max}[op](np.stack(ins), axis=0).astype(dt)
            check(f"array('{code}') all_reduce {op} n={n}", a, dt, want)
        # broadcast from the last rank into an array.array
        src = p - 1
        a = array.array("d", vals(rank, n, np.float64, 3).tolist())
        dist.broadcast(a, src=src)
        check(f"array('d') broadcast n={n}", a, np.float64, vals(src, n, np.float64, 3))
        # all_gather: bytearray in, bytearray out
        inb = bytearray(vals(rank, n, np.uint8, 4).tobytes())
        outb = bytearray(n * p)
        dist.all_gather_into_tensor(outb, inb)
        check(f"bytearray all_gather n={n}", outb, np.uint8,
              np.concatenate([vals(r, n, np.uint8, 4) for r in range(p)]))
        # reduce_scatter: array.array('i') in, array.array('i') out
        ins = [vals(r, n * p, np.int32, 5) for r in range(p)]
        ina = array.array("i", ins[rank].tolist())
        outa = array.array("i", [0]) * n
        dist.reduce_scatter_tensor(outa, ina, op="sum")
        check(f"array('i') reduce_scatter n={n}", outa, np.int32, np.sum(np.stack(ins), axis=0)[rank * n:(rank + 1) * n])
        # a float32 memoryview over a bytearray: the bytearray sees the result
        raw = bytearray(vals(rank, n, np.float32, 6).tobytes())
        dist.all_reduce(memoryview(raw).cast("f"), op="sum")
        check(f"memoryview('f') all_reduce n={n}", raw, np.float32,
              np.sum(np.stack([vals(r, n, np.float32, 6) for r in range(p)]), axis=0))
        # point to point: rank 0 sends an int16 view of a bytearray, rank 1 receives into an array('h')
        # (p2p messages carry their dtype: both sides must agree on it)
        if rank == 0:
            dist.send(memoryview(bytearray(vals(0, n, np.int16, 7).tobytes())).cast("h"), dst=1)
        elif rank == 1:
            got = array.array("h", [0]) * n
            dist.recv(got, src=0)
            check(f"array('h') recv n={n}", got, np.int16, vals(0, n, np.int16, 7))
        # async: the Work completes into the bytearray
        b = bytearray(vals(rank, n, np.uint8, 8).tobytes())
        w = dist.all_reduce(b, op="bor", async_op=True)
        w.wait(timeout=30)
        check(f"bytearray async all_reduce bor n={n}", b, np.uint8,
              np.bitwise_or.reduce(np.stack([vals(r, n, np.uint8, 8) for r in range(p)]), axis=0))
    dist.destroy()
    return {"checks": checks, "fails": fails, "channels": kinds}


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_buffer_protocol_objects_as_tensors(transport: str) -> None:
    res = run_ranks(2, buffers, env={"INTERLINK_TRANSPORT": transport}, timeout=90)
    want = "TcpChannel" if transport == "tcp" else "ShmChannel"
    assert all(r["channels"] == [want] for r in res), res  # the transport under test really ran
    fails = [f for r in res for f in r["fails"]]
    assert not fails, "\n".join(fails[:20])
    # 2 sizes x (3 bytearray + 4 array + broadcast + all_gather + reduce_scatter + memoryview + async) = 24
    # per rank, plus the receiver's 2 recv checks
    assert res[0]["checks"] == 24 and res[1]["checks"] == 26, res
