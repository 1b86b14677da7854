"""The transport table (transport/registry.py): its order and selection, the host page's API, the
runtime's policy, and a transport added from outside the package (tests/loopback_transport.py, one
``register`` line) carrying real collectives between real processes, checked against numpy."""

from __future__ import annotations

import os

import numpy as np
import pytest

from interlink.runtime import mesh, policy
from interlink.transport import registry
from interlink.transport.base import Transport
from interlink.transport.shm import BELL, FAST_SLOT_HDR, HostPage

import loopback_transport
from mp import run_ranks


def info(rank: int, host: str = "h0", wants: str = "", transports=None, loopback: bool | None = None) -> dict:
    """What a rank publishes at init (runtime/mesh.py build_mesh)."""
    d = {"rank": rank, "host": host, "tcp": ["127.0.0.1", 1000 + rank], "unix": f"u{rank}",
         "transport": wants, "transports": list(registry.names() if transports is None else transports)}
    if loopback is not None:
        d["info"] = {"loopback": {"on": loopback}}
    return d


@pytest.fixture
def with_loopback():
    registry.register(loopback_transport.TRANSPORT, before="shm")
    try:
        yield loopback_transport.TRANSPORT
    finally:
        registry.unregister("loopback")


# ---- order and selection -----------------------------------------------------------------------

def test_default_table_is_shm_then_tcp() -> None:
    assert registry.names() == ("shm", "tcp")
    assert registry.get("shm").host_page and not registry.get("tcp").host_page
    assert registry.get("shm").connections == (("ctrl", "unix"),)
    assert registry.get("tcp").connections == (("ctrl", "tcp"), ("data", "tcp"))


def test_select_first_that_can_connect() -> None:
    assert registry.select(info(0), info(1)).name == "shm"  # same host
    assert registry.select(info(0, "h0"), info(1, "h1")).name == "tcp"  # different hosts
    # both ranks run select on the same two records, in either order: the same answer
    for a, b in [(info(0), info(1)), (info(3, "h0"), info(1, "h1")), (info(2, wants="tcp"), info(5))]:
        assert registry.select(a, b) is registry.select(b, a)


def test_select_what_a_rank_asks_for() -> None:
    assert registry.select(info(0, wants="tcp"), info(1)).name == "tcp"  # either rank asking is enough
    assert registry.select(info(0), info(1, wants="tcp")).name == "tcp"
    assert registry.select(info(0, wants="shm"), info(1)).name == "shm"
    # shm across hosts cannot: the table's order goes on
    assert registry.select(info(0, "h0", wants="shm"), info(1, "h1", wants="shm")).name == "tcp"


def test_select_only_what_both_ranks_have() -> None:
    assert registry.select(info(0, transports=["tcp"]), info(1)).name == "tcp"
    with pytest.raises(LookupError, match="no transport can connect ranks 0 and 1"):
        registry.select(info(0, "h0", transports=["shm"]), info(1, "h1"))


def test_register_order_and_refusals(with_loopback) -> None:
    assert registry.names() == ("loopback", "shm", "tcp")
    assert registry.get("loopback") is with_loopback
    # it connects only ranks of one host that both turn it on; otherwise the next entries decide
    assert registry.select(info(0, loopback=True), info(1, loopback=True)).name == "loopback"
    assert registry.select(info(0, loopback=True), info(1, loopback=False)).name == "shm"
    assert registry.select(info(0, "h0", loopback=True), info(1, "h1", loopback=True)).name == "tcp"
    # a rank without it in its table (it did not register it) is never connected by it
    assert registry.select(info(0, loopback=True), info(1, loopback=True, transports=["shm", "tcp"])).name == "shm"
    # INTERLINK_TRANSPORT=tcp in one rank of the pair wins over an earlier entry
    assert registry.select(info(0, loopback=True, wants="tcp"), info(1, loopback=True)).name == "tcp"
    with pytest.raises(ValueError, match="already registered"):
        registry.register(loopback_transport.LoopbackTransport())

    class Bad(Transport):
        name = "bad"
        connections = (("x", "rdma"),)

    with pytest.raises(ValueError, match="unknown endpoints"):
        registry.register(Bad())
    Bad.connections = (("x", "tcp"), ("x", "tcp"))
    with pytest.raises(ValueError, match="distinct purposes"):
        registry.register(Bad())
    Bad.name, Bad.connections = "Bad.1", (("x", "tcp"),)
    with pytest.raises(ValueError, match="lower-case name"):
        registry.register(Bad())
    Bad.name = "bad"
    registry.register(Bad())  # at the end by default: after tcp, which connects everything
    try:
        assert registry.names()[-1] == "bad"
        assert registry.select(info(0, "h0"), info(1, "h1")).name == "tcp"
    finally:
        registry.unregister("bad")
    assert registry.names() == ("loopback", "shm", "tcp")


def test_unknown_transport_refused_at_init() -> None:
    with pytest.raises(ValueError, match="INTERLINK_TRANSPORT=nope: no such transport.*shm, tcp"):
        mesh.build_mesh(0, 2, None, b"s", "127.0.0.1", 1, 1.0, transport="nope")


def test_host_page_members(with_loopback) -> None:
    table = registry.transports()
    # default: every rank of a host on the page, not the other host's
    infos = [info(0, "a"), info(1, "a"), info(2, "b"), info(3, "a")]
    assert mesh._page_members(0, infos, table) == [0, 1, 3]
    assert mesh._page_members(2, infos, table) == [2]
    # INTERLINK_TRANSPORT=tcp in one rank: the others still share the page
    infos = [info(0), info(1), info(2, wants="tcp")]
    assert [mesh._page_members(r, infos, table) for r in range(3)] == [[0, 1], [0, 1], [2]]
    # every pair on the loopback transport: no page
    infos = [info(r, loopback=True) for r in range(3)]
    assert [mesh._page_members(r, infos, table) for r in range(3)] == [[0], [1], [2]]
    # 0-1 loopback, 0-2 and 1-2 shm: 0 and 1 would share 2's page without sharing one with each other;
    # every rank of the host refuses alike (none waits for a page that never comes)
    infos = [info(0, loopback=True), info(1, loopback=True), info(2, loopback=False)]
    for r in range(3):
        with pytest.raises(ValueError, match=r"ranks \[0, 1, 2\] of one host would share a host page, but ranks 0 "
                                             r"and 1"):
            mesh._page_members(r, infos, table)


# ---- the host page's API and the policy ---------------------------------------------------------

def test_host_page_api() -> None:
    page, fd = HostPage.create(3, 8192)
    os.close(fd)
    W, B = page.words64(), page.words32()
    for i in range(3):
        W[page.done_word(i)] = 10 + i
        W[page.agree_word(i)] = 20 + i
    assert page.done.tolist() == [10, 11, 12]
    assert [W[page.agree_word(i)] for i in range(3)] == [20, 21, 22]
    bell = page.bell(1)
    bell.set_sleeping(True)
    assert [B[page.sleeping_word(i)] for i in range(3)] == [0, 1, 0]
    bell.set_sleeping(False)
    # slot words and views name the same bytes
    for i in range(3):
        for q in (0, 1):
            W[page.slot_word(i, q) + 4] = 100 * i + q
            assert int(page.slot_header(i, q)[4]) == 100 * i + q
            assert page.slot_offset(i, q) == 8 * page.slot_word(i, q)
    rows = page.stacked(1, np.dtype(np.float32), 4)
    rows[...] = np.arange(12, dtype=np.float32).reshape(3, 4)
    for i in range(3):
        off = page.slot_offset(i, 1) + FAST_SLOT_HDR
        assert np.frombuffer(page.mm, np.float32, 4, off).tolist() == rows[i].tolist()
    res = page.result(0, np.dtype(np.int64), 2)
    res[...] = [7, 8]
    assert W[page.slot_word(3, 0) + FAST_SLOT_HDR // 8] == 7
    # the bell blocks come before the slots, which do not overlap
    assert page.slot_offset(0, 0) >= 3 * BELL
    assert page.slot_offset(3, 1) + FAST_SLOT_HDR + 8192 <= HostPage.size(3, 8192)


def test_policy_defaults_and_overrides(monkeypatch) -> None:
    for k in ("INTERLINK_CMA_MIN_BYTES", "INTERLINK_CMA_ALLGATHER_MIN_BYTES", "INTERLINK_SHM_SLOT_BYTES",
              "INTERLINK_SHM_SLOTS", "INTERLINK_FAST_MAX_BYTES", "INTERLINK_SHM_DIRECT_MAX_BYTES",
              "INTERLINK_SHM_AR_DIRECT_MIN_BYTES", "INTERLINK_FAST_CHUNK_BYTES"):
        monkeypatch.delenv(k, raising=False)
    assert policy.cma_threshold("all_reduce") == 2 << 20 and policy.cma_threshold("all_gather") == 256 << 10
    assert policy.ring_params() == (256 << 10, 16)
    assert policy.transport_params() == {"shm.slot_bytes": 256 << 10, "shm.slots": 16}
    assert (policy.fast_small_bytes(), policy.fast_max_bytes(), policy.ar_direct_min_bytes(),
            policy.fast_chunk_bytes()) == (256 << 10, 4 << 20, 2 << 20, 128 << 10)
    monkeypatch.setenv("INTERLINK_SHM_SLOT_BYTES", "5000")
    monkeypatch.setenv("INTERLINK_SHM_SLOTS", "1")
    assert policy.ring_params() == (4096, 2)
    monkeypatch.setenv("INTERLINK_FAST_MAX_BYTES", "0")
    assert policy.fast_max_bytes() == 0


# ---- a job over the added transport --------------------------------------------------------------

def vals(rank: int, n: int, dt, salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng([rank, n, salt])
    return rng.integers(-50, 200, size=n).astype(dt)


def loopback_job(rank: int, world: int, register: bool) -> dict:
    import interlink as dist
    from interlink.runtime import api
    from interlink.transport import registry as reg

    import loopback_transport as lt

    if register:
        reg.register(lt.TRANSPORT, before="shm")  # the one line
    dist.init(timeout=60)
    eng = api._CTX.engine
    out = {"transports": dict(eng.transports), "kinds": sorted({type(c).__name__ for c in eng.channels.values()}),
           "local": sorted({bool(c.local) for c in eng.channels.values()}), "fast": api._CTX.fast is not None,
           "page": eng.bell is not None}
    fails: list[str] = []
    p = world
    for n in (5, 70_001):  # one header-and-payload write; a streamed payload
        for dt in (np.float64, np.int32):
            ins = [vals(r, n, dt, 1) for r in range(p)]
            a = ins[rank].copy()
            dist.all_reduce(a)
            if not np.array_equal(a, np.sum(np.stack(ins), axis=0, dtype=dt)):
                fails.append(f"all_reduce {dt.__name__} n={n}")
            b = vals(rank, n, dt, 2)
            dist.broadcast(b, src=p - 1)
            if not np.array_equal(b, vals(p - 1, n, dt, 2)):
                fails.append(f"broadcast {dt.__name__} n={n}")
            o = np.empty(p * n, dtype=dt)
            dist.all_gather_into_tensor(o, vals(rank, n, dt, 3))
            if not np.array_equal(o, np.concatenate([vals(r, n, dt, 3) for r in range(p)])):
                fails.append(f"all_gather {dt.__name__} n={n}")
            # send/recv around the ring: even ranks send first
            nxt, prv = (rank + 1) % p, (rank - 1) % p
            got = np.empty(n, dtype=dt)
            if rank % 2 == 0:
                dist.send(vals(rank, n, dt, 4), nxt)
                dist.recv(got, prv)
            else:
                dist.recv(got, prv)
                dist.send(vals(rank, n, dt, 4), nxt)
            if not np.array_equal(got, vals(prv, n, dt, 4)):
                fails.append(f"send/recv {dt.__name__} n={n}")
    dist.barrier()
    out.update(fails=fails, sent=lt.LoopbackChannel.sent, received=lt.LoopbackChannel.received)
    dist.destroy()
    return out


def test_collectives_over_an_added_transport() -> None:
    res = run_ranks(3, loopback_job, True, env={loopback_transport.ENV: "1"}, timeout=120)
    for r, out in enumerate(res):
        assert out["fails"] == [], (r, out["fails"])
        assert out["transports"] == {j: "loopback" for j in range(3) if j != r}, out
        assert out["kinds"] == ["LoopbackChannel"] and out["local"] == [True], out
        # no host page, so no shared-page fast path: every byte went through the loopback channels
        assert out["page"] is False and out["fast"] is False, out
        # each of the 4 (size, dtype) rounds sends at least one message of all_reduce, all_gather, send
        assert out["sent"] >= 12 and out["received"] >= 12, out


def test_added_transport_unused_where_a_rank_lacks_it() -> None:
    # both ask for it, but only rank 0 registered it: the pair falls back to the table both have (shm)
    res = run_ranks(2, _lacking_job, env={loopback_transport.ENV: "1"}, timeout=90)
    for r, out in enumerate(res):
        assert out["fails"] == [], (r, out["fails"])
        assert out["transports"] == {1 - r: "shm"} and out["kinds"] == ["ShmChannel"], out
        assert out["page"] is True and out["sent"] == 0, out


def _lacking_job(rank: int, world: int) -> dict:
    return loopback_job(rank, world, rank == 0)
