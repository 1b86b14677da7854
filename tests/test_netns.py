"""``interlink run --emulate-hosts``: jobs on hosts emulated with network namespaces, and their cleanup.

Runs the collective suite of test_runtime_collectives across 2 emulated hosts x 2 ranks, checks that
ranks on one host use shared memory and ranks on different hosts TCP, that a 1gbit link really limits
throughput, that --link-delay is refused where the kernel lacks netem, and that nothing of a run is
left (namespaces, links, processes) after success, a killed rank, SIGTERM, or SIGKILL + cleanup_stale.
Needs root and iproute2; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from interlink.launch import netns
from interlink.launch.netns import EmulationError, parse_delay, parse_rate, tbf_params

JOB = str(Path(__file__).with_name("netns_job.py"))
MiB = 1 << 20


def _netns_unusable() -> str | None:
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"iproute2's {tool!r} is not installed"
    name = f"{netns.run_prefix()}pr"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    try:  # what the emulation needs from the kernel: veth, bridge, tbf
        for argv, what in ((["ip", "-n", name, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb"], "veth"),
                           (["ip", "-n", name, "link", "add", "name", "br0", "type", "bridge"], "bridge"),
                           (["tc", "-n", name, "qdisc", "add", "dev", "va", "root", "tbf", "rate", "1gbit",
                             "burst", "128k", "latency", "20ms"], "tbf")):
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                return f"this kernel cannot make a {what} device/qdisc: {done.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


_WHY = _netns_unusable()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLINK_SECRET", "INTERLINK_TRANSPORT")}
    env.update(extra)
    return env


def _start(args: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "interlink", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(**env))


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"interlink run did not finish in {timeout}s\n{out[-3000:]}\n{err[-3000:]}")
    return proc.returncode, out, err


def _results(out: str) -> dict[int, dict]:
    res = {}
    for line in out.splitlines():
        m = re.match(r"\[host (\d+)\] \[rank (\d+)\] RESULT (.*)$", line)
        if m:
            d = json.loads(m.group(3))
            assert d["rank"] == int(m.group(2)) and d["node"] == int(m.group(1)), line
            res[d["rank"]] = d
    return res


def _processes_of(prefix: str) -> list[int]:
    """Processes (anywhere on the machine) started for the run: their environment names its interfaces."""
    needle = f"INTERLINK_IFNAME={prefix}h".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if any(v.startswith(needle) for v in env.split(b"\0")):
            found.append(int(entry))
    return found


def _assert_clean(pid: int) -> None:
    prefix = netns.run_prefix(pid)
    deadline = time.monotonic() + 5
    while True:
        left = netns.leftovers(prefix) + [f"process {p}" for p in _processes_of(prefix)]
        qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
        left += [f"qdisc {ln}" for ln in qdiscs.splitlines() if prefix in ln]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"run {prefix} left behind: {left}"


def _check_locality(res: dict[int, dict], hosts: int, per_host: int) -> None:
    """Every rank: shm to the ranks of its host, tcp to the others; one namespace per host."""
    assert sorted(res) == list(range(hosts * per_host))
    for r, d in res.items():
        host = r // per_host
        assert d["ifname"].split(",")[0].endswith(f"h{host}")
        assert (d["netns"] == res[0]["netns"]) == (host == 0)
        if d.get("layout") is not None:  # what the runtime's hierarchical algorithms will use
            assert d["layout"] == [hosts, per_host], f"rank {r}"
        if "channels" in d:
            want = {str(p): "ShmChannel" if p // per_host == host else "TcpChannel"
                    for p in range(hosts * per_host) if p != r}
            assert d["channels"] == want, f"rank {r}"


# ---- no root needed -----------------------------------------------------------------------------


def test_units() -> None:
    assert parse_rate("1gbit") == 10**9
    assert parse_rate("100Mbit") == 10**8
    assert parse_rate("125mbps") == 10**9
    assert parse_rate("2.5gbit") == 2_500_000_000
    assert parse_delay("1ms") == pytest.approx(1e-3)
    assert parse_delay("200us") == pytest.approx(2e-4)
    for bad in ("fast", "1gb/s", "", "-1gbit"):
        with pytest.raises(EmulationError, match="--link-rate"):
            parse_rate(bad)
    with pytest.raises(EmulationError, match="--link-delay"):
        parse_delay("soon")
    burst, _ = tbf_params(10**9)
    assert burst >= 64 * 1024  # a GSO super-packet must fit in the bucket
    assert netns._owned("il123h0", "il123") and netns._owned("il123n1p3", "il123n1")
    assert netns._owned("il123sw", "il") and not netns._owned("il123n1h0", "il123")
    assert not netns._owned("il1234h0", "il123") and not netns._owned("eth0", "il")


def test_flag_errors_without_root() -> None:
    for args, msg in ((["--link-rate", "1gbit", "-n", "1", JOB, "sleep"], "need --emulate-hosts"),
                      (["--emulate-hosts", "2", "--nnodes", "2", "-n", "1", JOB, "sleep"], "do not combine"),
                      (["--emulate-hosts", "2", JOB, "sleep"], "--nproc-per-host")):
        rc, _out, err = _finish(_start(args), timeout=30)
        assert rc == 2 and msg in err, err


# ---- emulated hosts -----------------------------------------------------------------------------


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_emulated_hosts_context_manager() -> None:
    with netns.EmulatedHosts(2, rate="1gbit") as hosts:
        assert [h.index for h in hosts] == [0, 1]
        prefix = hosts[0].netns[:-2]
        assert hosts[0].ip.startswith("10.213.") and hosts[0].ip != hosts[1].ip
        for h in hosts:
            addr = subprocess.run(["ip", "-n", h.netns, "-o", "-4", "addr", "show", "dev", h.ifname],
                                  capture_output=True, text=True, check=True).stdout
            assert f"{h.ip}/24" in addr
            qd = subprocess.run(["tc", "-n", h.netns, "qdisc", "show", "dev", h.ifname],
                                capture_output=True, text=True, check=True).stdout
            assert "tbf" in qd and "rate 1Gbit" in qd, qd
        ping = subprocess.run(hosts[0].command([sys.executable, "-c", (
            "import socket; s = socket.create_connection(('%s', 1), timeout=5)" % hosts[1].ip)]),
            capture_output=True, text=True)
        assert "ConnectionRefusedError" in ping.stderr  # host 1 answered (RST): the link works
        assert len(netns.leftovers(prefix)) == 2
    assert netns.leftovers(prefix) == []


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
@pytest.mark.parametrize("nhosts", [2, 3])
def test_several_nics_per_host_one_rail_each(nhosts: int) -> None:
    """--nics K: every host gets K shaped NICs; NIC r of every host is on rail r (its own subnet), and a
    connection to a host's rail-r address leaves through the sender's rail-r NIC."""
    with netns.EmulatedHosts(nhosts, rate="1gbit", nics=2) as hosts:
        prefix = hosts[0].netns[:-2]
        subnets = [{ip.rsplit(".", 1)[0] for _, ip in (h.nics[r] for h in hosts)} for r in range(2)]
        assert all(len(sn) == 1 for sn in subnets) and subnets[0] != subnets[1], subnets
        for h in hosts:
            assert len(h.nics) == 2 and h.nics[0] == (h.ifname, h.ip) and h.ifnames == ",".join(n for n, _ in h.nics)
            for ifname, ip in h.nics:
                addr = subprocess.run(["ip", "-n", h.netns, "-o", "-4", "addr", "show", "dev", ifname],
                                      capture_output=True, text=True, check=True).stdout
                assert f"{ip}/24" in addr
                qd = subprocess.run(["tc", "-n", h.netns, "qdisc", "show", "dev", ifname],
                                    capture_output=True, text=True, check=True).stdout
                assert "tbf" in qd and "rate 1Gbit" in qd, qd

        def tx(host, ifname):
            out = subprocess.run(["ip", "netns", "exec", host.netns, "cat", f"/sys/class/net/{ifname}/statistics/tx_bytes"],
                                 capture_output=True, text=True, check=True).stdout
            return int(out)

        src, dst = hosts[0], hosts[-1]
        for r in range(2):
            before = [tx(src, n) for n, _ in src.nics]
            send = subprocess.run(src.command([sys.executable, "-c", (
                "import socket\nfor _ in range(20):\n    try:\n        socket.create_connection(('%s', 1), timeout=5)\n"
                "    except ConnectionRefusedError:\n        pass" % dst.nics[r][1])]), capture_output=True, text=True)
            assert send.returncode == 0, send.stderr
            grew = [tx(src, n) - b for (n, _), b in zip(src.nics, before)]
            assert grew[r] > 0 and grew[1 - r] < grew[r], (r, grew)  # the SYNs left on rail r
        assert len(netns.leftovers(prefix)) == nhosts + (1 if nhosts > 2 else 0)
    assert netns.leftovers(prefix) == []
    with pytest.raises(EmulationError, match="--nics"):
        with netns.EmulatedHosts(2, nics=0):
            pass


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
@pytest.mark.parametrize("part", ["reduce", "move"])
def test_collective_suite_across_two_hosts(part: str) -> None:
    proc = _start(["--emulate-hosts", "2", "--nproc-per-host", "2", JOB, "suite", part], INTERLINK_DEBUG="INFO")
    rc, out, err = _finish(proc, timeout=180)
    assert rc == 0, f"{out[-3000:]}\n{err[-5000:]}"
    res = _results(out)
    _check_locality(res, 2, 2)
    fails = [f for d in res.values() for f in d["fails"]]
    assert not fails, "\n".join(fails[:20])
    assert all(d["checks"] > 20 for d in res.values())
    # the runtime's own account of its connections (INTERLINK_DEBUG=INFO)
    seen = {}
    for m in re.finditer(r"^\[host (\d)\] \[rank (\d)\] .*rank \2 connected: shm \[(.*?)\], tcp \[(.*?)\]",
                         err, re.M):
        r = int(m.group(2))
        seen[r] = ([int(x) for x in m.group(3).split(",") if x.strip()],
                   [int(x) for x in m.group(4).split(",") if x.strip()])
    assert seen == {0: ([1], [2, 3]), 1: ([0], [2, 3]), 2: ([3], [0, 1]), 3: ([2], [0, 1])}, err[-3000:]
    _assert_clean(proc.pid)


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_1gbit_link_limits_throughput() -> None:
    nbytes = 16 * MiB
    proc = _start(["--emulate-hosts", "2", "--nproc-per-host", "2", "--link-rate", "1gbit", JOB, "probe",
                   str(nbytes)])
    rc, out, err = _finish(proc)
    assert rc == 0, f"{out[-3000:]}\n{err[-3000:]}"
    res = _results(out)
    _check_locality(res, 2, 2)
    assert all(d["ok"] for d in res.values())
    # host 1 receives the 16 MiB over the shaped link: >= 0.134 s at 1 Gbit/s (unshaped: ~0.01 s)
    slowest = max(d["seconds"] for d in res.values())
    gbits = nbytes * 8 / slowest / 1e9
    assert slowest >= 0.1, f"16 MiB crossed a 1gbit link in {slowest:.3f} s ({gbits:.2f} Gbit/s)"
    assert gbits <= 1.1
    _assert_clean(proc.pid)


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_a_job_runs_on_hosts_with_two_nics() -> None:
    """interlink run --nics 2: every rank sees both interfaces in INTERLINK_IFNAME and the job runs (a lane
    per NIC: test_two_nics_carry_one_lane_each)."""
    proc = _start(["--emulate-hosts", "2", "--nproc-per-host", "2", "--nics", "2", "--link-rate", "10gbit", JOB,
                   "probe", str(MiB)])
    rc, out, err = _finish(proc)
    assert rc == 0, f"{out[-3000:]}\n{err[-3000:]}"
    res = _results(out)
    _check_locality(res, 2, 2)
    assert all(d["ok"] and len(d["ifname"].split(",")) == 2 for d in res.values()), res
    _assert_clean(proc.pid)


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_two_nics_carry_one_lane_each() -> None:
    """interlink run --nics 2, no env var: the ring runs 2 channels (the tuner's count from the NICs), each
    TCP pair opens 2 lanes, lane r goes from this rank's NIC r to the peer's NIC r, and both NICs carry
    the bytes (their tx counters grow by about half the ring's traffic each)."""
    nbytes = 8 * MiB
    proc = _start(["--emulate-hosts", "2", "--nproc-per-host", "2", "--nics", "2", "--link-rate", "10gbit", JOB,
                   "lanes", str(nbytes)])
    rc, out, err = _finish(proc)
    assert rc == 0, f"{out[-3000:]}\n{err[-3000:]}"
    res = _results(out)
    _check_locality(res, 2, 2)
    for r, d in res.items():
        assert d["ok"] and d["ring_channels"] == 2, d
        peers = [p for p in range(4) if p // 2 != r // 2]
        assert sorted(map(int, d["lanes"])) == peers, d
        for p in peers:
            lanes = d["lanes"][str(p)]
            assert [ln["lane"] for ln in lanes] == [0, 1], d
            for k, ln in enumerate(lanes):
                assert ln["local"] == d["addrs"][k] and ln["remote"] == res[p]["addrs"][k], (r, p, ln)
        # the host's NIC counters during the call: a ring of 4 over 2 hosts sends 2 x 3/4 of the buffer out
        # of each host, half of it (6 MiB) over each NIC
        assert all(t > nbytes // 2 for t in d["tx"]), d
    _assert_clean(proc.pid)


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_three_hosts_on_a_bridge() -> None:
    proc = _start(["--emulate-hosts", "3", "--nproc-per-host", "1", "--link-rate", "10gbit", JOB, "probe",
                   str(MiB)])
    rc, out, err = _finish(proc)
    assert rc == 0, f"{out[-3000:]}\n{err[-3000:]}"
    res = _results(out)
    _check_locality(res, 3, 1)
    assert all(d["ok"] for d in res.values())
    _assert_clean(proc.pid)


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_killed_rank_stops_every_host_and_cleans_up() -> None:
    proc = _start(["--emulate-hosts", "2", "--nproc-per-host", "2", JOB, "kill", "3"])
    rc, out, err = _finish(proc)
    assert rc != 0
    # host 1's launcher names rank 3, unless host 0 (whose ranks lost rank 3) failed first and host 1
    # was stopped before it noticed; either way the error names the dead rank
    assert ("[host 1] interlink run: rank 3 was killed by SIGKILL" in err
            or "rank 3 died or closed its connection" in err), err[-3000:]
    assert re.search(r"^interlink run: host [01] \(namespace il\d+h[01], 10\.213\.\d+\.[12]\) .*first failure",
                     err, re.M), err[-3000:]
    _assert_clean(proc.pid)


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_signal_to_the_command_cleans_up(sig: signal.Signals) -> None:
    proc = _start(["--emulate-hosts", "2", "--nproc-per-host", "2", JOB, "sleep"])
    ready: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.rstrip().endswith("ready"):
                ready.append(line)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while len(ready) < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert len(ready) == 4, proc.stderr.read() if proc.poll() is not None else "ranks never became ready"
    prefix = netns.run_prefix(proc.pid)
    assert len(netns.leftovers(prefix)) >= 2 and len(_processes_of(prefix)) >= 4
    proc.send_signal(sig)
    proc.wait(timeout=30)
    t.join(5)
    err = proc.stderr.read()
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "received SIGTERM" in err
    else:
        # nothing can run after SIGKILL: the ranks die with their launchers (PR_SET_PDEATHSIG),
        # the namespaces stay until cleanup_stale (which the next emulated run also calls)
        assert proc.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while _processes_of(prefix) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_of(prefix) == []
        assert any(item.startswith("namespace ") for item in netns.leftovers(prefix))
        removed = netns.cleanup_stale(prefix)
        assert f"namespace {prefix}h0" in removed and f"namespace {prefix}h1" in removed
    _assert_clean(proc.pid)


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_link_delay_is_never_silently_ignored() -> None:
    available, _why = netns.netem_available()
    proc = _start(["--emulate-hosts", "2", "--nproc-per-host", "1", "--link-delay", "1ms", JOB, "probe", "8"])
    rc, out, err = _finish(proc)
    if available:  # this kernel has netem: the delay is applied and the job runs
        assert rc == 0, err[-3000:]
    else:
        assert rc == 2, err
        assert "--link-delay needs the netem qdisc" in err and "never silently ignored" in err
        assert "RESULT" not in out  # refused before any rank started
    _assert_clean(proc.pid)


@pytest.mark.netns
@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
@pytest.mark.parametrize("per_host,leaver", [(1, 1), (2, 3), (2, 0)])
def test_a_rank_that_leaves_right_after_sending_is_still_heard(per_host: int, leaver: int) -> None:
    """Across hosts a rank's BYE travels on its control connection and its last bytes on a data connection:
    on a slow link (20 Mbit/s, 1 MiB takes ~0.4 s) the BYE arrives first. The receiver must take every byte
    the rank sent (a send, a broadcast it was root of, a send received from any source), and only then be
    told it left the job, at once, by the next receive from it (also when the rank that left is rank 0,
    which hosts the store and stays up to 5 s for the other ranks' goodbyes: it ends its data connections
    right after its BYE)."""
    nbytes = 1 * MiB
    proc = _start(["--emulate-hosts", "2", "--nproc-per-host", str(per_host), "--link-rate", "20mbit", JOB,
                   "leave", str(nbytes), str(leaver)])
    rc, out, err = _finish(proc)
    res = _results(out)
    last = 2 * per_host - 1
    hearer = last if leaver == 0 else 0
    assert hearer in res, f"{out[-3000:]}\n{err[-3000:]}"
    got = res[hearer]
    assert "recv_error" not in got, got["recv_error"]
    assert got["recv_ok"] and got["bcast_ok"] and got["any_ok"] and got["any_from"] == leaver, got
    assert got["recv_s"] >= 0.2, f"1 MiB crossed the 20 Mbit/s link in {got['recv_s']:.3f} s: not shaped"
    assert got["left_error"] and "PeerLostError" in got["left_error"], got
    assert f"rank {leaver} left the job" in got["left_error"], got["left_error"]
    assert got["left_s"] < 2.0, got
    assert all(res[r]["bcast_ok"] for r in range(2 * per_host) if r not in (leaver, hearer)), res
    assert rc == 0, f"{out[-3000:]}\n{err[-3000:]}"
    _assert_clean(proc.pid)
