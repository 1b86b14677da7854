"""Emulated hosts on one machine: network namespaces joined by veth pairs, shaped with tc.

``interlink run --emulate-hosts H --nproc-per-host P script.py`` makes H network namespaces and
starts, in each one, the ordinary multi-node launcher (``interlink run -n P --nnodes H --node-rank k
--master <host 0>:<port>``). Ranks in different namespaces have different host identities (the
runtime's identity includes the network namespace), so they talk TCP over the emulated links exactly
as ranks on different machines do, while ranks in one namespace share memory.

What is made, per run (``PREFIX`` is ``il<pid>``, unique per run; see :func:`run_prefix`)

    ==============  ===========================================================================
    namespaces      ``PREFIX h0`` .. ``PREFIX h{H-1}`` (one per host); for H > 2 also ``PREFIX sw``
    links           H == 2: one veth pair, ``PREFIX h0`` in host 0 <-> ``PREFIX h1`` in host 1;
                    H > 2: in every host ``PREFIX h{k}``, its peer ``PREFIX p{k}`` a port of the
                    bridge ``PREFIX br`` in the switch namespace
    addresses       ``10.213.N.{k+1}/24`` on host k's interface (N depends on the run); lo is up
    shaping         ``--link-rate``: a tbf qdisc on every egress of a link (host -> link, and on
                    the switch's ports link -> host), i.e. a full-duplex NIC of that rate per host;
                    ``--link-delay``: a netem qdisc (one-way delay host to host), refused with a
                    clear error where the kernel lacks netem
    ==============  ===========================================================================

Nothing is made in the machine's own network namespace (veths are created directly inside their
namespaces), and the namespaces have no route out: no packet of an emulated run can leave the
machine. Teardown kills every process still inside the namespaces, then deletes them, which removes
the veths, the bridge and the qdiscs with them; it runs on success, failure, a killed rank, and
SIGINT/SIGTERM/SIGHUP to ``interlink run``. A run killed with SIGKILL cannot clean up: its leftovers
are removed by :func:`cleanup_stale` (also called automatically for a prefix about to be reused).

Requires Linux, root, and iproute2 (``ip``, and ``tc`` for shaping); :func:`check_requirements`
raises :class:`EmulationError` (exit status 2 from the command line) saying which is missing.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Mapping, Sequence

from ..topology.links import TopologyError, delay_seconds, rate_bits
from .supervisor import (DEFAULT_GRACE, Output, Signals, death_signal_preexec, describe_status, exit_status, monitor,
                         start_pumps, stop_all, write)

__all__ = [
    "EmulationError",
    "EmulatedHost",
    "EmulatedHosts",
    "MASTER_PORT",
    "check_requirements",
    "cleanup_stale",
    "launch_emulated",
    "leftovers",
    "netem_available",
    "parse_delay",
    "parse_rate",
    "run_prefix",
    "tbf_params",
]

#: the rendezvous port on host 0 (every run has its own fresh namespaces, so it is always free)
MASTER_PORT = 29500
#: first two octets of the emulated hosts' addresses
SUBNET = "10.213"
MAX_HOSTS = 253
_IFNAMSIZ = 15
# our names: the run prefix (il<pid>, or il<pid>n<seq>), then the object: h<k> host namespace and its
# interface, sw switch namespace, br bridge, p<k> switch port, pr scratch namespace of the netem probe
_NAME_RE = re.compile(r"^(il(\d+)(?:n\d+)?)(?:h\d+(?:r\d+)?|sw|pr|p\d+(?:r\d+)?|br\d*)$")
MAX_NICS = 8
_POLL = 0.05


class EmulationError(RuntimeError):
    """The emulation cannot be set up (not root, no iproute2, no netem for --link-delay, bad flags)."""


@dataclass(frozen=True)
class EmulatedHost:
    """One emulated host: its namespace, the interface its peers reach it on, and that address.
    ``nics``: (interface, address) of each of its NICs, rail by rail (the first is ``ifname``/``ip``);
    NIC r of every host is on rail r (its own link or bridge, its own subnet)."""

    index: int
    netns: str
    ifname: str
    ip: str
    nics: tuple = ()

    @property
    def ifnames(self) -> str:
        """INTERLINK_IFNAME for this host: its interfaces, comma-separated."""
        return ",".join(n for n, _ in self.nics) if self.nics else self.ifname

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this host's network namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


# ---- units (tc's, shared with the topology's shaped links) ---------------------------------------


def parse_rate(text: str) -> int:
    """A tc rate (``1gbit``, ``100mbit``, ``125mbps`` = bytes/s, a bare number = bit/s) in bit/s."""
    try:
        bits = int(rate_bits(text))
    except TopologyError:
        raise EmulationError(f"--link-rate {text!r}: expected a number and a tc unit, e.g. 1gbit, 100mbit, "
                             f"10gbit, 125mbps (bytes/s)") from None
    if bits < 8000:
        raise EmulationError(f"--link-rate {text!r}: at least 8kbit")
    return bits


def parse_delay(text: str) -> float:
    """A tc time (``1ms``, ``200us``, ``0.5ms``, a bare number = microseconds) in seconds."""
    try:
        return delay_seconds(text)
    except TopologyError:
        raise EmulationError(f"--link-delay {text!r}: expected a number and a unit, e.g. 1ms, 200us") from None


def tbf_params(rate_bits: int) -> tuple[int, float]:
    """(burst in bytes, queue latency in seconds) of the tbf that shapes a link of ``rate_bits``.

    The bucket must hold the largest packet the stack hands the qdisc (TSO/GSO super-packets of up
    to 64 KiB on a veth) or throughput collapses; 2 ms of traffic (250 KB at 1 Gbit/s) keeps the
    measured rate within a few per cent of the nominal one. The queue holds 20 ms of traffic.
    """
    burst = max(128 * 1024, int(rate_bits / 8 * 0.002))
    return burst, 0.020


# ---- commands ---------------------------------------------------------------------------------


def _run(argv: Sequence[str], check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except FileNotFoundError as exc:
        raise EmulationError(f"cannot run {argv[0]!r}: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise EmulationError(f"`{' '.join(argv)}` did not finish within {timeout:g}s") from exc
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
        raise EmulationError(f"`{' '.join(argv)}` failed: {msg}")
    return proc


def check_requirements(need_tc: bool = True) -> None:
    """Raise :class:`EmulationError` unless this is Linux, we are root, and iproute2 is installed."""
    if not sys.platform.startswith("linux"):
        raise EmulationError(f"--emulate-hosts needs Linux network namespaces (this is {sys.platform})")
    if os.geteuid() != 0:
        raise EmulationError("--emulate-hosts needs root (it creates network namespaces, veth pairs and tc "
                             "qdiscs): run it as root, e.g. with sudo, or in a container with CAP_NET_ADMIN "
                             "and CAP_SYS_ADMIN")
    missing = [tool for tool in (("ip", "tc") if need_tc else ("ip",)) if shutil.which(tool) is None]
    if missing:
        raise EmulationError(f"--emulate-hosts needs iproute2: {' and '.join(repr(t) for t in missing)} not found "
                             f"on PATH (install the iproute2 package)")


def run_prefix(pid: int | None = None, seq: int = 0) -> str:
    """The name prefix of one run's namespaces and interfaces: ``il<pid>`` (``il<pid>n<seq>`` for a
    second emulation live in the same process)."""
    pid = os.getpid() if pid is None else pid
    return f"il{pid}" + (f"n{seq}" if seq else "")


def _netns_names() -> list[str]:
    proc = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def _netns_pids(ns: str) -> list[int]:
    proc = _run(["ip", "netns", "pids", ns], check=False)
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def _root_links() -> list[str]:
    proc = _run(["ip", "-o", "link", "show"], check=False)
    names = []
    for line in proc.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def _owned(name: str, prefix: str) -> bool:
    """Is ``name`` one of our namespace/interface names, of the run ``prefix`` (or any run: ``il``)?"""
    m = _NAME_RE.match(name)
    return m is not None and (prefix == "il" or m.group(1) == prefix)


def _owner(name: str) -> tuple[str, int]:
    """(run prefix, pid of the process that made it) of one of our names."""
    m = _NAME_RE.match(name)
    assert m is not None
    return m.group(1), int(m.group(2))


def _kill_netns_processes(ns: str, attempts: int = 40) -> list[int]:
    """SIGKILL every process inside ``ns`` until none is left; returns those that survived."""
    pids: list[int] = []
    for _ in range(attempts):
        pids = [p for p in _netns_pids(ns) if p != os.getpid()]
        if not pids:
            return []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(_POLL)
    return pids


def leftovers(prefix: str) -> list[str]:
    """What still exists of the runs under ``prefix``: namespaces, root-namespace links, processes."""
    found = []
    for ns in _netns_names():
        if _owned(ns, prefix):
            found.append(f"namespace {ns}")
            found += [f"process {pid} in {ns}" for pid in _netns_pids(ns)]
    found += [f"link {name}" for name in _root_links() if _owned(name, prefix)]
    return found


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale(prefix: str = "il", *, include_live: bool = False) -> list[str]:
    """Remove what crashed runs under ``prefix`` left behind; returns what was removed.

    ``prefix`` is one run's prefix (``il12345``, see :func:`run_prefix`) or ``il`` for every run.
    Namespaces whose owning process (the pid in the name) is still alive are kept unless
    ``include_live``, so cleaning up cannot break a running job; an emulation live in this very
    process is always kept.
    For each namespace: kill the processes inside, then delete it (its veths, bridge and qdiscs go
    with it); finally delete links of ours left in this namespace.
    """
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return []
    with _active_lock:
        active = set(_active)

    def keep(name: str) -> bool:
        run, pid = _owner(name)
        if run in active and run != prefix:  # an emulation of this process, not the one asked for
            return True
        return not include_live and pid != os.getpid() and _pid_alive(pid)

    removed = []
    for ns in _netns_names():
        if not _owned(ns, prefix) or keep(ns):
            continue
        for pid in _kill_netns_processes(ns):
            removed.append(f"process {pid} in {ns} (would not die)")
        if _run(["ip", "netns", "del", ns], check=False).returncode == 0:
            removed.append(f"namespace {ns}")
    for name in _root_links():
        if _owned(name, prefix) and not keep(name):
            if _run(["ip", "link", "del", name], check=False).returncode == 0:
                removed.append(f"link {name}")
    return removed


def netem_available(prefix: str | None = None) -> tuple[bool, str]:
    """Probe for the netem qdisc by adding one in a scratch namespace; (available, tc's message)."""
    ns = f"{prefix or run_prefix()}pr"
    _run(["ip", "netns", "del", ns], check=False)
    made = _run(["ip", "netns", "add", ns], check=False)
    if made.returncode != 0:
        raise EmulationError(f"cannot create a network namespace ({ns}): "
                             f"{(made.stderr or made.stdout).strip()}")
    try:
        _run(["ip", "-n", ns, "link", "set", "lo", "up"], check=False)
        probe = _run(["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"], check=False)
        return probe.returncode == 0, (probe.stderr or probe.stdout).strip()
    finally:
        _run(["ip", "netns", "del", ns], check=False)


# ---- the emulation ----------------------------------------------------------------------------

_active_lock = threading.Lock()
_active: set[str] = set()


def _shape(ns: str, dev: str, rate_bits: int | None, delay_s: float | None) -> None:
    """Egress of ``dev`` in ``ns``: tbf at ``rate_bits``, behind netem ``delay_s`` when given."""
    tc = ["tc", "-n", ns, "qdisc", "add", "dev", dev]
    tbf = []
    if rate_bits:
        burst, latency = tbf_params(rate_bits)
        tbf = ["tbf", "rate", f"{rate_bits}bit", "burst", str(burst), "latency", f"{int(latency * 1e6)}us"]
    if delay_s:
        # the netem queue must hold a delay's worth of packets at line rate (default 1000)
        limit = max(1000, int((rate_bits or 10**10) / 8 * delay_s / 1500) * 2)
        _run(tc + ["root", "handle", "1:", "netem", "delay", f"{int(delay_s * 1e6)}us", "limit", str(limit)])
        if tbf:
            _run(tc + ["parent", "1:1", "handle", "10:"] + tbf)
    elif tbf:
        _run(tc + ["root", "handle", "1:"] + tbf)


@contextmanager
def EmulatedHosts(h: int, rate: str | int | None = None, delay: str | float | None = None, nics: int = 1
                  ) -> Iterator[list[EmulatedHost]]:
    """Make ``h`` emulated hosts (network namespaces linked by veths, shaped); yield them; tear down.

    ``rate`` is a tc rate (``"1gbit"``) or bit/s; ``delay`` a tc time (``"1ms"``) or seconds, the
    one-way delay between two hosts. ``nics``: NICs per host, each shaped at ``rate``: NIC r of every
    host joins rail r (a veth pair for 2 hosts, a bridge of its own otherwise; a subnet of its own), as
    rail-optimised GPU fabrics are wired. Raises :class:`EmulationError` when this machine cannot do it
    (not root, no iproute2, no netem for ``delay``) before anything is made. Everything made is
    removed on exit, whatever the exit (processes still inside the namespaces are killed).
    """
    if not isinstance(h, int) or not 2 <= h <= MAX_HOSTS:
        raise EmulationError(f"--emulate-hosts must be 2..{MAX_HOSTS}, got {h}")
    if not isinstance(nics, int) or not 1 <= nics <= MAX_NICS:
        raise EmulationError(f"--nics must be 1..{MAX_NICS}, got {nics}")
    rate_bits = None if rate in (None, "", 0) else (int(rate) if isinstance(rate, int) else parse_rate(rate))
    delay_s = None if delay in (None, "", 0) else (float(delay) if isinstance(delay, (int, float))
                                                   else parse_delay(delay))
    check_requirements(need_tc=bool(rate_bits or delay_s))
    with _active_lock:
        seq = 0
        while run_prefix(seq=seq) in _active:
            seq += 1
        prefix = run_prefix(seq=seq)
        _active.add(prefix)
    try:
        if len(f"{prefix}p{h - 1}" + (f"r{nics - 1}" if nics > 1 else "")) > _IFNAMSIZ:
            raise EmulationError(f"interface names under prefix {prefix!r} would exceed {_IFNAMSIZ} characters")
        # a crashed run of a process that had our pid left these: nobody else can own them
        cleanup_stale(prefix, include_live=True)
        if delay_s:
            ok, why = netem_available(prefix)
            if not ok:
                raise EmulationError(
                    f"--link-delay needs the netem qdisc (kernel module sch_netem), which this kernel lacks "
                    f"(tc: {why or 'netem unavailable'}). Load it (modprobe sch_netem) or run without "
                    f"--link-delay; the delay is never silently ignored.")
        base = os.getpid() % 254
        subnets = [f"{SUBNET}.{(base + r) % 254 + 1}" for r in range(nics)]  # one per rail
        hosts = []
        for k in range(h):
            ports = tuple((f"{prefix}h{k}" + (f"r{r}" if r else ""), f"{subnets[r]}.{k + 1}") for r in range(nics))
            hosts.append(EmulatedHost(k, f"{prefix}h{k}", ports[0][0], ports[0][1], ports))
        try:
            yield _build(prefix, hosts, rate_bits, delay_s)
        finally:
            _teardown(prefix)
    finally:
        with _active_lock:
            _active.discard(prefix)


def _build(prefix: str, hosts: list[EmulatedHost], rate_bits: int | None, delay_s: float | None
           ) -> list[EmulatedHost]:
    for host in hosts:
        made = _run(["ip", "netns", "add", host.netns], check=False)
        if made.returncode != 0:
            raise EmulationError(f"cannot create network namespace {host.netns}: "
                                 f"{(made.stderr or made.stdout).strip()} (`ip netns add` must work: root with "
                                 f"CAP_SYS_ADMIN and a writable /run/netns)")
        _run(["ip", "-n", host.netns, "link", "set", "lo", "up"])
    nics = len(hosts[0].nics) or 1
    shaped = []
    sw = f"{prefix}sw"
    if len(hosts) > 2:
        made = _run(["ip", "netns", "add", sw], check=False)
        if made.returncode != 0:
            raise EmulationError(f"cannot create network namespace {sw}: {(made.stderr or made.stdout).strip()}")
        _run(["ip", "-n", sw, "link", "set", "lo", "up"])
    for r in range(nics):
        sfx = f"r{r}" if r else ""
        ifs = [host.nics[r][0] if host.nics else host.ifname for host in hosts]
        if len(hosts) == 2:
            (a, b), (ia, ib) = hosts, ifs
            _run(["ip", "link", "add", "name", ia, "netns", a.netns, "type", "veth", "peer", "name", ib,
                  "netns", b.netns])
            shaped += [(a.netns, ia), (b.netns, ib)]
            continue
        br = f"{prefix}br" + (str(r) if r else "")
        _run(["ip", "-n", sw, "link", "add", "name", br, "type", "bridge"])
        # no STP, no forwarding delay: the ports forward at once
        _run(["ip", "-n", sw, "link", "set", br, "type", "bridge", "stp_state", "0", "forward_delay", "0"],
             check=False)
        _run(["ip", "-n", sw, "link", "set", br, "up"])
        for host, ifname in zip(hosts, ifs):
            port = f"{prefix}p{host.index}{sfx}"
            _run(["ip", "link", "add", "name", ifname, "netns", host.netns, "type", "veth", "peer", "name", port,
                  "netns", sw])
            _run(["ip", "-n", sw, "link", "set", port, "master", br])
            _run(["ip", "-n", sw, "link", "set", port, "up"])
            shaped.append((host.netns, ifname))
            if rate_bits:  # the port's egress is the host's ingress: a full-duplex NIC
                _shape(sw, port, rate_bits, None)
    for host in hosts:
        for ifname, ip in (host.nics or ((host.ifname, host.ip),)):
            _run(["ip", "-n", host.netns, "addr", "add", f"{ip}/24", "dev", ifname])
            _run(["ip", "-n", host.netns, "link", "set", ifname, "up"])
    for ns, dev in shaped:
        _shape(ns, dev, rate_bits, delay_s)
    return hosts


def _teardown(prefix: str) -> None:
    # a Ctrl-C now must not cut the teardown short: hold the signals until it is done
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    blocked = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held) if blocked else None
    try:
        names = [ns for ns in _netns_names() if _owned(ns, prefix)]
        # processes first: `ip netns del` only removes the name while processes keep a namespace alive
        for ns in names:
            _kill_netns_processes(ns)
        for ns in names:
            _run(["ip", "netns", "del", ns], check=False)
        for name in _root_links():
            if _owned(name, prefix):
                _run(["ip", "link", "del", name], check=False)
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


# ---- launching ranks on the emulated hosts -----------------------------------------------------


@dataclass
class _HostProc:
    host: EmulatedHost
    proc: subprocess.Popen
    threads: list
    also_failed: bool = False


class _Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def launch_emulated(
    cmd: Sequence[str],
    hosts: int,
    nproc_per_host: int,
    *,
    rate: str | None = None,
    delay: str | None = None,
    nics: int = 1,
    grace: float = DEFAULT_GRACE,
    env: Mapping[str, str] | None = None,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
) -> int:
    """Run ``cmd`` (arguments after the interpreter) as ``nproc_per_host`` ranks on each of ``hosts``
    emulated hosts; returns the exit status like :func:`interlink.launch.local.launch`.

    Host k runs ``ip netns exec NS python -m interlink run -n P --nnodes H --node-rank k --master
    <host 0>:29500 cmd`` with one job secret for all and INTERLINK_IFNAME set to its interfaces (``nics``
    of them, comma-separated, the first one reaching host 0's store); its
    output lines get a ``[host k] `` prefix. When a host's launcher fails the others are stopped and
    the host is named; SIGINT/SIGTERM/SIGHUP are forwarded; the emulation is torn down in every case.
    Raises :class:`EmulationError` when the emulation cannot be made.
    """
    if nproc_per_host < 1:
        raise EmulationError(f"--nproc-per-host must be >= 1, got {nproc_per_host}")
    if not cmd:
        raise EmulationError("nothing to run: give a script (or -m module)")
    base_env = dict(os.environ if env is None else env)
    base_env["INTERLINK_SECRET"] = secrets.token_hex(32)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        base_env.pop(key, None)
    if rate and "INTERLINK_NET" not in base_env:
        # the tuner models the network between the hosts as what the emulation shapes it to
        base_env["INTERLINK_NET"] = f"{rate}@{delay}" if delay else str(rate)
    lock = threading.Lock()
    out = Output(stdout if stdout is not None else sys.stdout.buffer, lock)
    err = Output(stderr if stderr is not None else sys.stderr.buffer, lock)

    launched = [False]

    def on_first(signum: int) -> None:
        if not launched[0]:
            raise _Interrupted(signum)  # still setting up: unwind through the teardown

    procs: list[_HostProc] = []
    with Signals(on_first) as sigs:
        try:
            check_requirements(need_tc=bool(rate or delay))
            for item in cleanup_stale("il"):  # leftovers of emulated runs that were SIGKILLed
                write(err, f"interlink run: removed {item} left by an earlier emulated run that was killed\n")
            with EmulatedHosts(hosts, rate=rate, delay=delay, nics=nics) as hlist:
                master = f"{hlist[0].ip}:{MASTER_PORT}"
                preexec = death_signal_preexec()
                try:
                    for host in hlist:
                        henv = dict(base_env, INTERLINK_IFNAME=host.ifnames)
                        argv = host.command([sys.executable, "-m", "interlink", "run", "-n", str(nproc_per_host),
                                             "--nnodes", str(hosts), "--node-rank", str(host.index),
                                             "--master", master, "--grace", str(grace), *cmd])
                        proc = subprocess.Popen(argv, env=henv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec)
                        hp = _HostProc(host, proc, [])
                        procs.append(hp)
                        hp.threads = start_pumps(proc, f"[host {host.index}] ".encode(), out, err, None,
                                                 f"interlink-host{host.index}")
                    launched[0] = True
                    # a host's launcher forwards the signal to its ranks and kills them after the grace: give
                    # it that grace, and a little more, before SIGKILL
                    failed, interrupted = monitor(procs, sigs.received, grace, extra=2.0)
                except BaseException:
                    launched[0] = True
                    stop_all(procs, grace, extra=2.0)
                    raise
                for hp in procs:
                    for t in hp.threads:
                        t.join(timeout=2.0)
        except _Interrupted as exc:
            interrupted, failed = exc.signum, None

    if interrupted is not None:
        name = signal.Signals(interrupted).name
        what = (f"stopped all {hosts} emulated hosts" if len(procs) == hosts else
                f"stopped while setting up ({len(procs)} of {hosts} hosts started)")
        write(err, f"interlink run: received {name}, {what} and removed the emulation\n")
        return 128 + int(interrupted)
    if failed is not None:
        code = failed.proc.returncode
        also = [f"host {hp.host.index} also failed ({describe_status(hp.proc.returncode)})"
                for hp in procs if hp.also_failed]
        others = [hp.host.index for hp in procs if hp is not failed and not hp.also_failed]
        write(err, f"interlink run: host {failed.host.index} (namespace {failed.host.netns}, {failed.host.ip}) "
                    f"{describe_status(code)} (first failure)" + "".join(f"; {a}" for a in also)
                    + (f"; stopped hosts {others}" if others else "") + "\n")
        return exit_status(code)
    return 0
