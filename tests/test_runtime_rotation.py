"""The slots' rotation (FastPath._rotation): successive calls of one shape put their payload at
successive places of the host page's slots, the place a function of the call count.

What it could get wrong is where a rank reads: a stale place (a previous call's data), a place the
writer has not written, or ranks that place one call differently. So every call here carries data of
its own (a function of the call's index), each shape is called more than twice around its cycle of
places, on every slot path (one-shot, reduce-once, the page programs of `slots` and `two_phase`), in place
and out of place, and every result is compared with numpy. Ranks whose policy places a call differently
must get a mismatch error, not a result.
"""

from __future__ import annotations

import numpy as np
import pytest

from mp import RankFailure, run_ranks


def _rotated(rank: int, world: int, sizes: list[int]) -> tuple[int, list[str], dict]:
    import interlink as dist
    from interlink.runtime import api

    dist.init(timeout=60)
    p = world
    fails: list[str] = []
    checks = 0
    npos: dict = {}
    fp = api._world()._fast
    for nbytes in sizes:
        for dt in (np.float32, np.int64):
            isz = np.dtype(dt).itemsize
            n = max(p, nbytes // isz // p * p)
            m = n // p
            for call in range(40):
                def val(r: int, count: int, salt: int) -> np.ndarray:
                    return ((np.arange(count) * 7 + 13 * r + 101 * call + salt) % 251).astype(dt)

                xs = [val(r, n, 0) for r in range(p)]
                total = sum(x.astype(np.int64) for x in xs).astype(dt)
                got = {}
                # all_reduce, in place
                x = xs[rank].copy()
                dist.all_reduce(x)
                got["all_reduce"] = (x, total)
                # broadcast from a root that moves with the call, in place
                root = call % p
                y = xs[rank].copy() if rank == root else np.zeros(n, dt)
                dist.broadcast(y, src=root)
                got["broadcast"] = (y, xs[root])
                # all_gather, out of place and in place (the input is this rank's block of the output)
                blocks = [val(r, m, 5) for r in range(p)]
                o = np.zeros(n, dt)
                dist.all_gather_into_tensor(o, blocks[rank])
                got["all_gather"] = (o, np.concatenate(blocks))
                o2 = np.zeros(n, dt)
                o2[rank * m:(rank + 1) * m] = blocks[rank]
                dist.all_gather_into_tensor(o2, o2[rank * m:(rank + 1) * m])
                got["all_gather in place"] = (o2, np.concatenate(blocks))
                # reduce_scatter, out of place
                rs = np.zeros(m, dt)
                dist.reduce_scatter_tensor(rs, xs[rank])
                got["reduce_scatter"] = (rs, total[rank * m:(rank + 1) * m])
                for name, (g, e) in got.items():
                    checks += 1
                    if not np.array_equal(g, e):
                        bad = np.flatnonzero(g != e)
                        fails.append(f"rank {rank} {name} {nbytes}B {np.dtype(dt)} call {call}: {bad.size} wrong, "
                                     f"first at {bad[0]}: {g[bad[0]]} != {e[bad[0]]}")
            for key, top in fp.shapes.items():
                # (positions, distinct payload addresses among them); a measured shape's two Smalls
                for sc in (top.tune.alts if top and top.tune is not None else (top,) if top else ()):
                    views = sc.stack if sc.program is not None else sc.mine
                    places = {v.__array_interface__["data"][0] for v in views}
                    npos[f"{sc.sigb.decode().split()[0]} {sc.count}"] = (sc.npos, len(places))
    dist.destroy()
    return checks, fails[:10], npos


@pytest.mark.parametrize("nranks,once", [(2, ""), (3, ""), (3, "1"), (5, "0")])
def test_rotated_slots_against_numpy(nranks: int, once: str) -> None:
    # 16 KiB (the rotation's lower edge), the one-shot all_reduce's limit (32 KiB), the one-shot size of the others,
    # and the page programs above them (two_phase from 32 KiB)
    sizes = [16 << 10, 32 << 10, 48 << 10, 64 << 10, 200 << 10]
    # (256 KiB a parity: the 40 calls of the 16 KiB shapes go round their 32 positions; the default cycle,
    # 2 MiB, would give them 128 and the calls would never come back to a place)
    env = {"INTERLINK_SLOT_ROTATE": "1", "INTERLINK_FAST_REDUCE_ONCE": once,
           "INTERLINK_SLOT_ROTATION_BYTES": str(256 << 10)}
    res = run_ranks(nranks, _rotated, sizes, env=env, timeout=400)
    for checks, fails, _ in res:
        assert checks == 40 * 2 * len(sizes) * 5 and not fails, fails
    npos = res[0][2]
    # the calls did rotate, each position at a place of its own: the smallest rotated payloads (16 KiB, on 5
    # ranks 32 KiB) through 8-16 places per parity (256 KiB / 16 or 32 KiB), the one-shot and the programs'
    # paths alike (the count of places: test_the_places_a_payload_rotates_through)
    assert all(places == n for n, places in npos.values()), npos
    assert max(n for n, _ in npos.values()) == (16 if nranks == 5 else 32), npos
    for coll in ("all_reduce", "broadcast", "all_gather", "reduce_scatter"):  # (2 ranks: all_reduce two_phase)
        assert any(n > 2 for k, (n, _) in npos.items()
                   if k.startswith(coll + ":slots") or k.startswith(coll + ":two_phase")), (coll, npos)


def test_the_places_a_payload_rotates_through() -> None:
    """FastPath._rotation's arithmetic: (places per parity, stride) cover about slot_rotation_bytes a parity
    (both parities together twice that, past a reader's L2), at most MAX_ROTATION places (64: a 32 KiB payload
    cycles through 4 MiB, where 16 places, 1 MiB, left its lines in the reader's L2), within ROTATION_BUDGET
    for every rank's slots and within a slot; none below slot_rotation_min_bytes or with rotation off."""
    from types import SimpleNamespace

    from interlink.runtime.pageproto import MAX_ROTATION, ROTATION_BUDGET, PageProtocol

    def rot(nbytes: int, n: int = 2, rot_bytes: int = 2 << 20, rot_min: int = 16 << 10, slot: int = 4 << 20):
        fp = SimpleNamespace(rot_bytes=rot_bytes, rot_min=rot_min, n=n, page=SimpleNamespace(fast_max=slot))
        return PageProtocol._rotation(fp, nbytes)

    assert MAX_ROTATION == 64
    assert rot(16 << 10) == (64, 16 << 10)  # 2 MiB / 16 KiB = 128, the cap
    assert rot(32 << 10) == (64, 32 << 10)
    assert rot(48 << 10) == (43, 48 << 10)  # ceil(2 MiB / 48 KiB)
    assert rot(64 << 10) == (32, 64 << 10)
    assert rot((64 << 10) + 1) == (31, 68 << 10)  # page-aligned places: ceil(2 MiB / 68 KiB)
    assert rot(256 << 10) == (8, 256 << 10)
    assert rot(1 << 20) == (2, 1 << 20)
    assert rot(4 << 20) == (1, 4 << 20)  # a slot holds one
    assert rot((16 << 10) - 1) == (1, 0) and rot(64 << 10, rot_bytes=0) == (1, 0)
    # every rank's slots, both parities, every place within the budget (8 ranks: 32 MiB / (2 x 8 x 64 KiB) = 32)
    assert rot(64 << 10, n=8) == (32, 64 << 10)
    assert rot(128 << 10, n=8) == (16, 128 << 10)
    assert rot(256 << 10, n=64) == (1, 256 << 10)
    for n in (2, 3, 8, 64):
        for kib in (16, 20, 32, 64, 100, 512, 2048):
            places, stride = rot(kib << 10, n=n)
            assert 1 <= places <= MAX_ROTATION and places * stride <= 4 << 20
            assert places == 1 or 2 * n * places * stride <= ROTATION_BUDGET


def _misplaced(rank: int, world: int) -> str:
    import os

    # rank 0 cycles through 1 MiB of its slot, the others through 2 MiB: a 256 KiB broadcast has 4 places
    # per parity on one side and 8 on the other
    os.environ["INTERLINK_SLOT_ROTATION_BYTES"] = str((1 << 20) if rank == 0 else (2 << 20))
    import interlink as dist

    dist.init(timeout=20)
    x = np.full(1 << 16, rank, np.float32)
    try:
        for _ in range(3):
            dist.broadcast(x, src=0)
    except Exception as e:  # noqa: BLE001 - the test reads the error
        try:
            dist.destroy()
        except Exception:  # noqa: BLE001
            pass
        return f"{type(e).__name__}: {e}"
    try:  # a root that ran ahead of its receivers through all three learns at destroy
        dist.destroy()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__} at destroy: {e}"
    return f"no error, x[0] = {x[0]}"


def test_ranks_that_place_a_call_differently_mismatch() -> None:
    try:
        res = run_ranks(2, _misplaced, env={"INTERLINK_SLOT_ROTATE": "1"}, timeout=120)
    except RankFailure as e:  # a rank may die of the error instead of returning it
        res = [str(e)] * 2
    for r in res:
        assert "CollectiveMismatchError" in r or "mismatch" in r.lower(), res
        assert "broadcast" in r, res


def _host_page_resident(rank: int, world: int) -> tuple[int, int]:
    """(KiB of the host page's mapping resident in this process right after init, its size in KiB)."""
    import interlink as dist

    dist.init()
    rss = size = 0
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            if "-" in line.split()[0] and not line.split()[0].endswith(":"):  # a mapping's first line
                inside = "interlink-host" in line
                if inside:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    size += (hi - lo) // 1024
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
    dist.barrier()
    dist.destroy()
    return rss, size


@pytest.mark.parametrize("populate", ["1", "0"])
def test_the_host_page_is_present_from_init(populate: str) -> None:
    """INTERLINK_SHM_POPULATE=1 (the default) maps the host page with every page present in every rank,
    so that no call pays for the first touch of a rotated slot place; 0 leaves it to the first touches."""
    res = run_ranks(2, _host_page_resident, env={"INTERLINK_SHM_POPULATE": populate}, timeout=120)
    for rss, size in res:
        assert size >= 4 << 10, f"no host page mapping found ({size} KiB)"
        if populate == "1":
            assert rss >= 0.95 * size, f"{rss} of {size} KiB resident after init"
        else:
            assert rss <= 0.5 * size, f"{rss} of {size} KiB resident after init without populating"
