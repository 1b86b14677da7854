"""The rendezvous store, launcher detection, rendezvous() and store_barrier()."""

from __future__ import annotations

import errno
import logging
import math
import multiprocessing as mp
import socket
import struct
import threading
import time

import pytest

from interlink.errors import AuthenticationError, CommTimeoutError, PeerLostError
from interlink.launch.env import DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT, detect_env
from interlink.runtime.rendezvous import rendezvous, store_barrier
from interlink.runtime.store import StoreClient, StoreServer
from interlink.transport.wire import authenticate_client, send_frame
from mp import free_port

SECRET = b"test-job-secret"




@pytest.fixture
def server():
    srv = StoreServer("127.0.0.1", 0, SECRET, auth_timeout=1.0)
    yield srv
    srv.close()


@pytest.fixture
def client(server):
    c = StoreClient("127.0.0.1", server.port, SECRET, timeout=10.0, connect_timeout=5.0)
    yield c
    c.close()


def _in_thread(fn, *args, **kwargs):
    box: dict = {}

    def target():
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()

    def join(timeout=20):
        t.join(timeout)
        assert not t.is_alive(), "helper thread hung"
        return box.get("result"), box.get("error")

    return join


# ---------------------------------------------------------------------------- store basics


def test_set_get_add_check_delete(client):
    client.set("a", b"1")
    client.set("text", "héllo")
    client.set("empty", b"")
    client.set("bin", bytes(range(256)))
    assert client.get("a") == b"1"
    assert client.get("text") == "héllo".encode()
    assert client.get("empty") == b""
    assert client.get("bin") == bytes(range(256))
    assert client.add("n", 5) == 5
    assert client.add("n", -2) == 3
    assert client.add("n") == 4
    assert client.get("n") == b"4"
    assert client.check(["a", "n"]) is True
    assert client.check("nope") is False
    assert client.missing(["a", "x", "y"]) == ["x", "y"]
    assert client.delete("a") is True
    assert client.delete("a") is False
    assert client.check("a") is False
    assert client.num_keys() == 4


def test_large_value(client):
    value = bytes(range(256)) * 4096 * 4  # 4 MiB
    client.set("big", value)
    assert client.get("big") == value


def test_add_on_non_integer_is_value_error(client):
    client.set("s", b"abc")
    with pytest.raises(ValueError, match="not an integer"):
        client.add("s", 1)
    assert client.get("s") == b"abc"  # connection still usable


def test_compare_set(client):
    assert client.compare_set("k", None, b"first") == (True, b"first")
    assert client.compare_set("k", None, b"other") == (False, b"first")
    assert client.compare_set("k", b"wrong", b"x") == (False, b"first")
    assert client.compare_set("k", b"first", b"second") == (True, b"second")
    assert client.compare_set("missing", b"x", b"y") == (False, None)


def test_get_blocks_until_set(server, client):
    other = StoreClient("127.0.0.1", server.port, SECRET, timeout=10.0)
    join = _in_thread(client.get, "later", timeout=math.inf)
    time.sleep(0.2)
    other.set("later", b"v")
    value, err = join()
    other.close()
    assert err is None and value == b"v"


def test_wait_returns_when_all_keys_exist(server, client):
    other = StoreClient("127.0.0.1", server.port, SECRET)
    join = _in_thread(client.wait, ["k1", "k2"], 10.0)
    other.set("k1", b"")
    time.sleep(0.05)
    other.set("k2", b"")
    _, err = join()
    other.close()
    assert err is None


def test_get_missing_key_times_out_naming_the_key(client):
    t0 = time.monotonic()
    with pytest.raises(CommTimeoutError, match="'no/such/key'") as info:
        client.get("no/such/key", timeout=0.5)
    elapsed = time.monotonic() - t0
    assert 0.45 <= elapsed < 2.0
    assert isinstance(info.value, TimeoutError)
    # the connection stays usable
    client.set("x", b"1")
    assert client.get("x", timeout=0) == b"1"


def test_wait_timeout_names_missing_keys(client):
    client.set("have", b"1")
    with pytest.raises(CommTimeoutError, match=r"\['m1', 'm2'\]"):
        client.wait(["have", "m1", "m2"], timeout=0.2)


def test_negative_timeout_rejected(client):
    with pytest.raises(ValueError):
        client.get("x", timeout=-1)


def test_client_is_thread_safe(server):
    c = StoreClient("127.0.0.1", server.port, SECRET)
    errors = []

    def work():
        try:
            for _ in range(100):
                c.add("ctr", 1)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert c.add("ctr", 0) == 800
    c.close()


# ---------------------------------------------------------------------------- refusing strangers


def test_strangers_are_refused_while_a_legit_client_keeps_working(server, client, caplog):
    caplog.set_level(logging.DEBUG, logger="interlink")
    # a legitimate client blocked in get while strangers come and go
    waiter = _in_thread(client.get, "ready", timeout=10.0)

    # 1. garbage bytes
    g = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    g.recv(1024)
    g.sendall(b"\xde\xad\xbe\xef" * 64)
    # 2. a frame-shaped request without any handshake
    h = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    h.sendall(struct.pack("<Q", 1 << 40))
    # 3. a proper handshake with the wrong secret
    w = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    with pytest.raises(AuthenticationError):
        authenticate_client(w, b"wrong secret", 5.0)
    # 4. a silent connection (must not block anyone)
    silent = socket.create_connection(("127.0.0.1", server.port), timeout=5)

    for s in (g, h, w):  # the server closes them
        s.settimeout(5)
        try:
            while s.recv(1024):
                pass
        except ConnectionResetError:
            pass
        s.close()

    other = StoreClient("127.0.0.1", server.port, SECRET)
    other.set("ready", b"go")
    value, err = waiter()
    assert err is None and value == b"go"
    assert client.add("still", 1) == 1
    other.close()
    silent.close()
    # said where it happens, loud enough to be seen without INTERLINK_DEBUG
    assert any("refused" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_authenticated_raw_socket_sending_garbage_is_dropped(server, client):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    authenticate_client(s, SECRET, 5.0)
    send_frame(s, b"\xff" * 5)  # not a store request
    s.settimeout(5)
    assert s.recv(10) == b""  # dropped
    s.close()
    client.set("ok", b"1")
    assert client.get("ok") == b"1"


def test_client_with_wrong_secret_raises(server):
    with pytest.raises(AuthenticationError, match="INTERLINK_SECRET"):
        StoreClient("127.0.0.1", server.port, b"not the secret", connect_timeout=5.0)


def test_silent_stranger_is_dropped_after_auth_timeout(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    t0 = time.monotonic()
    s.recv(1024)  # the server's challenge
    assert s.recv(1024) == b""  # closed after auth_timeout=1
    assert time.monotonic() - t0 < 6
    s.close()


# ---------------------------------------------------------------------------- connect, disappear


def test_client_retries_until_server_starts():
    port = free_port()
    box = {}

    def start_late():
        time.sleep(0.5)
        box["srv"] = StoreServer("127.0.0.1", port, SECRET)

    t = threading.Thread(target=start_late)
    t.start()
    c = StoreClient("127.0.0.1", port, SECRET, connect_timeout=10.0)
    t.join()
    c.set("a", b"b")
    assert c.get("a") == b"b"
    c.close()
    box["srv"].close()


def test_connect_timeout_when_nobody_listens():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(CommTimeoutError, match=f"127.0.0.1:{port}"):
        StoreClient("127.0.0.1", port, SECRET, connect_timeout=0.5)
    assert time.monotonic() - t0 < 3


def test_server_disappearing_raises_peer_lost():
    srv = StoreServer("127.0.0.1", 0, SECRET)
    c = StoreClient("127.0.0.1", srv.port, SECRET)
    join = _in_thread(c.get, "never", timeout=30.0)
    time.sleep(0.2)
    t0 = time.monotonic()
    srv.close()
    _, err = join()
    assert isinstance(err, PeerLostError), err
    assert time.monotonic() - t0 < 5
    with pytest.raises(PeerLostError):  # the quick reconnect fails too
        c.set("x", b"1")
    c.close()


def test_server_close_linger_waits_for_clients():
    srv = StoreServer("127.0.0.1", 0, SECRET)
    c = StoreClient("127.0.0.1", srv.port, SECRET)
    t_reg = time.monotonic() + 5  # the server counts the client once its side of the handshake ends
    while srv.num_clients != 1 and time.monotonic() < t_reg:
        time.sleep(0.01)
    assert srv.num_clients == 1
    threading.Timer(0.3, c.close).start()
    t0 = time.monotonic()
    srv.close(linger=5.0)
    assert 0.2 < time.monotonic() - t0 < 3


# ---------------------------------------------------------------------------- barrier


def test_store_barrier_all_arrive(server):
    clients = [StoreClient("127.0.0.1", server.port, SECRET) for _ in range(4)]
    joins = [_in_thread(store_barrier, c, "b0", r, 4, 10.0) for r, c in enumerate(clients)]
    for j in joins:
        _, err = j()
        assert err is None
    for c in clients:
        c.close()


def test_store_barrier_names_the_missing_rank(server):
    clients = {r: StoreClient("127.0.0.1", server.port, SECRET) for r in (0, 1, 3)}
    t0 = time.monotonic()
    joins = [_in_thread(store_barrier, clients[r], "b1", r, 4, 0.5) for r in (0, 1, 3)]
    for j in joins:
        _, err = j()
        assert isinstance(err, CommTimeoutError)
        assert err.ranks == (2,)
        assert "did not arrive: [2]" in str(err)
    assert time.monotonic() - t0 < 3
    for c in clients.values():
        c.close()


def test_store_barrier_single_rank_and_bad_args(client):
    store_barrier(client, "solo", 0, 1)
    with pytest.raises(ValueError):
        store_barrier(client, "x", 3, 2)


# ---------------------------------------------------------------------------- real processes


def _worker(rank: int, world: int, port: int, q) -> None:
    try:
        client, server = rendezvous(rank, world, "127.0.0.1", port, SECRET, timeout=20.0)
        client.set(f"hello/{rank}", f"from {rank}".encode())
        n = client.add("counter", 10 + rank)
        client.wait([f"hello/{r}" for r in range(world)], timeout=20.0)
        got = {r: client.get(f"hello/{r}").decode() for r in range(world)}
        store_barrier(client, "end", rank, world, timeout=20.0)
        total = int(client.get("counter"))
        client.close()
        if server is not None:
            server.close(linger=10.0)
        q.put((rank, "ok", got, n, total, server is not None))
    except BaseException as e:  # noqa: BLE001
        q.put((rank, "error", repr(e), None, None, None))


def test_three_processes_rendezvous():
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    world = 3
    procs = [ctx.Process(target=_worker, args=(r, world, port, q)) for r in (2, 1, 0)]  # rank 0 last
    for p in procs:
        p.start()
    results = {}
    for _ in range(world):
        rank, status, *rest = q.get(timeout=60)
        results[rank] = (status, *rest)
    for p in procs:
        p.join(20)
        assert p.exitcode == 0
    for rank in range(world):
        status, got, n, total, has_server = results[rank]
        assert status == "ok", got
        assert got == {r: f"from {r}" for r in range(world)}
        assert total == 10 + 11 + 12
        assert has_server == (rank == 0)
    assert sorted(results[r][2] for r in range(world))[-1] == 33


def test_rendezvous_world_of_one_uses_a_free_port():
    client, server = rendezvous(0, 1, "127.0.0.1", DEFAULT_MASTER_PORT, SECRET, timeout=5.0)
    assert server is not None
    client.set("a", b"1")
    store_barrier(client, "b", 0, 1)
    client.close()
    server.close()


# ---------------------------------------------------------------------------- port in use


def test_port_in_use_gives_a_clear_error():
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        with pytest.raises(OSError, match=f"{port}.*already in use") as info:
            StoreServer("127.0.0.1", port, SECRET)
        assert info.value.errno == errno.EADDRINUSE
        assert "MASTER_PORT" in str(info.value)
        with pytest.raises(OSError, match=f"port {port}"):
            rendezvous(0, 2, "127.0.0.1", port, SECRET, timeout=1.0)
    finally:
        busy.close()


# ---------------------------------------------------------------------------- detect_env

_LAUNCHER_VARS = [
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_NODELIST",
]


@pytest.fixture
def clean_env(monkeypatch):
    for v in _LAUNCHER_VARS:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def test_detect_env_torchrun(clean_env):
    for k, v in dict(RANK="3", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
                     MASTER_ADDR="node0", MASTER_PORT="1234").items():
        clean_env.setenv(k, v)
    assert detect_env() == dict(rank=3, world_size=8, local_rank=1, local_world_size=2,
                                master_addr="node0", master_port=1234, source="env")


def test_detect_env_openmpi(clean_env):
    for k, v in dict(OMPI_COMM_WORLD_RANK="5", OMPI_COMM_WORLD_SIZE="6", OMPI_COMM_WORLD_LOCAL_RANK="2",
                     OMPI_COMM_WORLD_LOCAL_SIZE="3").items():
        clean_env.setenv(k, v)
    env = detect_env()
    assert env == dict(rank=5, world_size=6, local_rank=2, local_world_size=3,
                       master_addr=DEFAULT_MASTER_ADDR, master_port=DEFAULT_MASTER_PORT, source="openmpi")


def test_detect_env_mpich(clean_env):
    for k, v in dict(PMI_RANK="1", PMI_SIZE="4", MPI_LOCALRANKID="1", MPI_LOCALNRANKS="4",
                     MASTER_ADDR="10.1.2.3").items():
        clean_env.setenv(k, v)
    env = detect_env()
    assert env == dict(rank=1, world_size=4, local_rank=1, local_world_size=4,
                       master_addr="10.1.2.3", master_port=29500, source="mpich")


def test_detect_env_slurm(clean_env):
    for k, v in dict(SLURM_PROCID="9", SLURM_NTASKS="12", SLURM_LOCALID="1", SLURM_NODEID="2",
                     SLURM_TASKS_PER_NODE="4(x2),4", SLURM_JOB_NODELIST="gpu[017-019]",
                     SLURM_LAUNCH_NODE_IPADDR="10.0.0.99").items():
        clean_env.setenv(k, v)
    env = detect_env()
    assert env == dict(rank=9, world_size=12, local_rank=1, local_world_size=4,
                       master_addr="gpu017", master_port=29500, source="slurm")


def test_detect_env_slurm_step_values_and_launch_node(clean_env):
    for k, v in dict(SLURM_PROCID="0", SLURM_NTASKS="16", SLURM_STEP_NUM_TASKS="2", SLURM_LOCALID="0",
                     SLURM_JOB_NODELIST="a[1-2]-b[3-4]",  # not simple
                     SLURM_LAUNCH_NODE_IPADDR="10.0.0.99").items():
        clean_env.setenv(k, v)
    env = detect_env()
    assert env["world_size"] == 2
    assert env["master_addr"] == "10.0.0.99"
    assert env["local_world_size"] is None


def test_detect_env_precedence_and_explicit_override(clean_env):
    for k, v in dict(RANK="1", WORLD_SIZE="2", SLURM_PROCID="0", SLURM_NTASKS="1",
                     OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="5").items():
        clean_env.setenv(k, v)
    assert detect_env()["source"] == "env"
    env = detect_env(rank=0, world_size=4, master_addr="h", master_port=7)
    assert env["source"] == "explicit"
    assert (env["rank"], env["world_size"], env["master_addr"], env["master_port"]) == (0, 4, "h", 7)
    assert env["local_rank"] is None  # the environment's local values describe another world
    assert detect_env(master_port=0)["master_port"] == 0


def test_detect_env_explicit_only(clean_env):
    env = detect_env(rank=0, world_size=1)
    assert env == dict(rank=0, world_size=1, local_rank=0, local_world_size=1,
                       master_addr="127.0.0.1", master_port=29500, source="explicit")


def test_detect_env_missing_raises_listing_variables(clean_env):
    with pytest.raises(ValueError) as info:
        detect_env()
    msg = str(info.value)
    for var in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        assert var in msg
    clean_env.setenv("RANK", "0")
    with pytest.raises(ValueError, match="RANK is set but WORLD_SIZE is not"):
        detect_env()


@pytest.mark.parametrize(
    "env, match",
    [
        (dict(RANK="x", WORLD_SIZE="2"), "RANK='x' is not an integer"),
        (dict(RANK="2", WORLD_SIZE="2"), "rank must be in 0..1"),
        (dict(RANK="0", WORLD_SIZE="0"), "world_size must be >= 1"),
        (dict(RANK="0", WORLD_SIZE="2", MASTER_PORT="70000"), "master_port"),
    ],
)
def test_detect_env_bad_values(clean_env, env, match):
    for k, v in env.items():
        clean_env.setenv(k, v)
    with pytest.raises(ValueError, match=match):
        detect_env()


def test_detect_env_warns_when_multi_host_without_master_addr(clean_env, caplog):
    for k, v in dict(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="16",
                     OMPI_COMM_WORLD_LOCAL_SIZE="8", OMPI_COMM_WORLD_LOCAL_RANK="0").items():
        clean_env.setenv(k, v)
    with caplog.at_level(logging.WARNING, logger="interlink"):
        detect_env()
    assert any("MASTER_ADDR is not set" in r.getMessage() for r in caplog.records)


def test_detect_env_explicit_environ_mapping():
    env = detect_env(environ={"PMI_RANK": "0", "PMI_SIZE": "2"})
    assert env["source"] == "mpich" and env["world_size"] == 2


def test_torchrun_master_port_is_shifted_and_overridable():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29600", "TORCHELASTIC_RUN_ID": "abc"}
    assert detect_env(environ=env)["master_port"] == 29601  # torchrun's agent holds 29600
    env["INTERLINK_MASTER_PORT"] = "31000"
    assert detect_env(environ=env)["master_port"] == 31000
