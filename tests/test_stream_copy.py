"""Streaming copies (transport/stream.py): the copy itself against numpy at every alignment and size, the
fallback, and the host paths that use it (copies out of the slots into large outputs) against numpy with
the threshold lowered so that small, odd sizes take it, in and out of place, on 2 and 3 ranks."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from interlink.transport import stream
from mp import run_ranks


def test_the_streaming_copy_is_there_on_linux_x86_64() -> None:
    """Where it can be built it is (a build that silently fell back would hide every test below)."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64") \
            or os.environ.get("INTERLINK_STREAM_COPY") == "0":
        pytest.skip("no streaming copy on this platform")
    assert stream.available, stream.why_not


def test_the_copy_equals_numpy_at_every_alignment_and_size() -> None:
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, 1 << 18, dtype=np.uint8)
    sizes = [0, 1, 63, 64, 65, stream.MIN_BYTES - 1, stream.MIN_BYTES, stream.MIN_BYTES + 1, 4095, 4096,
             4097, 65536 + 17, 200_003]
    for n in sizes:
        for so in (0, 1, 15, 16, 63):
            for do in (0, 1, 8, 48, 63):
                dst = np.full(n + 256, 0xAB, np.uint8)
                stream.copy(dst[do:do + n], src[so:so + n])
                assert np.array_equal(dst[do:do + n], src[so:so + n]), (n, so, do)
                assert (dst[:do] == 0xAB).all() and (dst[do + n:] == 0xAB).all(), (n, so, do)  # nothing around it


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64, np.complex128, np.uint16])
def test_the_copy_keeps_every_dtype_and_shape(dtype) -> None:
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((37, 129)) * 100).astype(dtype)
    b = np.zeros_like(a)
    stream.copy(b, a)
    assert np.array_equal(a, b)
    ro = a.copy()
    ro.flags.writeable = False  # a read-only source (a peer's slot view may be one)
    c = np.zeros_like(a)
    stream.copy(c, ro)
    assert np.array_equal(c, a)


def test_turned_off_it_is_numpy_copy() -> None:
    code = ("import numpy as np; from interlink.transport import stream; "
            "a = np.arange(100001, dtype=np.float64); b = np.zeros_like(a); stream.copy(b, a); "
            "assert np.array_equal(a, b); print(stream.available, stream.why_not)")
    env = dict(os.environ, INTERLINK_STREAM_COPY="0")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False INTERLINK_STREAM_COPY=0"


# ---- the host paths that stream ------------------------------------------------------------------------

def _streamed_suite(rank: int, world: int) -> tuple[list[str], int]:
    """Every collective that copies out of the slots, at odd sizes and several dtypes, in and out of place,
    against numpy; how many streaming copies this rank made."""
    import interlink as dist
    from interlink.bench.peers import aligned_empty
    from interlink.transport import stream as st

    made = [0]
    plain = st.copy

    def counted(d, s):
        made[0] += 1
        plain(d, s)

    st.copy = counted  # bound by the executor at a call shape's first call
    dist.init(timeout=30)
    fails: list[str] = []

    def want(q: int, n: int, dt) -> np.ndarray:
        v = (np.arange(n) * (q + 3) + 7 * q) % 113
        return v.astype(dt)

    for dt in (np.float32, np.float64, np.int8, np.complex64):
        for n in (0, 1, 67, 1001, 1024, 4099, 9001, 16384):  # 1024, 16384: whole lines at page-aligned outputs
            blocks = [want(q, n, dt) for q in range(world)]
            full = np.concatenate(blocks) if n else np.zeros(0, dt)
            out = aligned_empty(n * world, dt)
            out.fill(9)
            dist.all_gather_into_tensor(out, blocks[rank].copy())
            if not np.array_equal(out, full):
                fails.append(f"rank {rank}: all_gather {np.dtype(dt).name} n={n}")
            buf = np.full(n * world, 9, dt)
            buf[rank * n:(rank + 1) * n] = blocks[rank]
            dist.all_gather_into_tensor(buf, buf[rank * n:(rank + 1) * n])
            if not np.array_equal(buf, full):
                fails.append(f"rank {rank}: all_gather in place {np.dtype(dt).name} n={n}")
            for root in (0, world - 1):
                x = blocks[root].copy() if rank == root else np.full(n, 5, dt)
                dist.broadcast(x, src=root)
                if not np.array_equal(x, blocks[root]):
                    fails.append(f"rank {rank}: broadcast root {root} {np.dtype(dt).name} n={n}")
            m = n * world + 3  # not divisible by the ranks
            y = want(rank, m, dt)
            exp = sum(want(q, m, dt) for q in range(world)).astype(dt)
            dist.all_reduce(y)
            if not np.array_equal(y, exp):
                fails.append(f"rank {rank}: all_reduce {np.dtype(dt).name} m={m}")
            z = want(rank, n * world, dt)
            o = np.full(n, 4, dt)
            dist.reduce_scatter_tensor(o, z)
            rexp = sum(want(q, n * world, dt) for q in range(world)).astype(dt)[rank * n:(rank + 1) * n]
            if not np.array_equal(o, rexp):
                fails.append(f"rank {rank}: reduce_scatter {np.dtype(dt).name} n={n}")
    dist.destroy()
    st.copy = plain
    return fails, made[0]


@pytest.mark.parametrize("world,path", [(2, "slots"), (3, "slots"), (2, "peer_buffers"), (3, "peer_buffers")])
def test_collectives_that_stream_equal_numpy(world: int, path: str) -> None:
    """The threshold lowered to one byte, so every copy of at least stream.MIN_BYTES that may stream does.
    slots: the slots' limits raised (every size here runs through the slots, step by step); peer_buffers: the
    all_gather's limit lowered to 1 KiB, so its own block is streamed into its output and pushed from the
    input (FastPath._push), in pieces of 64 KiB."""
    env = {"INTERLINK_STREAM_MIN_BYTES": "1", "INTERLINK_FAST_MAX_BYTES": "1024",
           "INTERLINK_FAST_INLINE_MAX_BYTES": "1024", "INTERLINK_FAST_CHUNK_BYTES": "4096",
           "INTERLINK_SHM_DIRECT_MAX_BYTES": str(256 << 10), "INTERLINK_SHM_AR_DIRECT_MIN_BYTES": str(256 << 10),
           "INTERLINK_SHM_SLOTS_MAX_BYTES_2": str(256 << 10), "INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG": str(256 << 10),
           "INTERLINK_SHM_SLOTS_MAX_BYTES_AG": str(256 << 10)}
    if path == "peer_buffers":
        env.update(INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG="1024", INTERLINK_SHM_SLOTS_MAX_BYTES_AG="1024")
    res = run_ranks(world, _streamed_suite, env=env, timeout=180)
    fails = [f for fl, _ in res for f in fl]
    assert not fails, "\n".join(fails[:10])
    if stream.available:
        assert all(made > 0 for _, made in res), [made for _, made in res]
