"""``interlink doctor``: is this machine set up for interlink? Each check is pass / warn / fail with what to do.

Checks (each a function returning a :class:`Check`, run by :func:`run_checks`):
transports (shared memory: a memfd mapped twice; TCP: a loopback connection), /dev/shm space, cross-memory
attach (Yama ptrace_scope and a real read of another process's memory), network interfaces and their
speeds (and INTERLINK_IFNAME), ranks per core, huge pages, torch / GPU / NVML, and the NCCL_* and
INTERLINK_* variables set (a misspelt INTERLINK_ name is named).
"""

from __future__ import annotations

import mmap
import os
import shutil
import socket
from dataclasses import dataclass
from typing import Callable, Optional

KNOWN_INTERLINK_VARS = frozenset("""
INTERLINK_ALGO INTERLINK_AUTH_TIMEOUT_S INTERLINK_AUTOTUNE INTERLINK_AUTOTUNE_REPROBE INTERLINK_CHANNELS INTERLINK_CMA
INTERLINK_CMA_ALLGATHER_MIN_BYTES INTERLINK_CMA_MIN_BYTES INTERLINK_CUDA_IPC INTERLINK_CUDA_IPC_MIN_BYTES
INTERLINK_CUDA_IPC_ORDER INTERLINK_DEBUG INTERLINK_DUMP_DIR INTERLINK_FAST INTERLINK_FAST_CHUNK_BYTES
INTERLINK_FAST_CMA INTERLINK_FAST_INLINE_MAX_BYTES INTERLINK_FAST_MAX_BYTES INTERLINK_FAST_REDUCE_ONCE
INTERLINK_FORMAT INTERLINK_IFNAME INTERLINK_JOIN_REPORT_S INTERLINK_MASTER_PORT INTERLINK_NET INTERLINK_PROFILE
INTERLINK_PUBLIC_SECRET INTERLINK_RECORDER INTERLINK_SCRATCH_KEEP_BYTES INTERLINK_SECRET INTERLINK_SECRET_FILE
INTERLINK_SHM_AR_DIRECT_MIN_BYTES INTERLINK_SHM_AR_ONESHOT_MAX_BYTES INTERLINK_SHM_AR_ONESHOT_MAX_BYTES_2 INTERLINK_SHM_DIRECT_MAX_BYTES INTERLINK_SHM_POPULATE INTERLINK_SHM_SLOTS
INTERLINK_SHM_SLOTS_MAX_BYTES_2 INTERLINK_SHM_SLOTS_MAX_BYTES_2_AG INTERLINK_SHM_SLOTS_MAX_BYTES_A2A
INTERLINK_SHM_SLOTS_MAX_BYTES_AG INTERLINK_SHM_SLOT_BYTES INTERLINK_SLOT_ROTATE INTERLINK_SLOT_ROTATION_BYTES
INTERLINK_SLOT_ROTATION_MIN_BYTES INTERLINK_SLOT_STREAM INTERLINK_SLOT_STREAM_MIN_BYTES INTERLINK_SPIN INTERLINK_SPIN_WALL_US INTERLINK_STREAM_COPY INTERLINK_STREAM_MIN_BYTES
INTERLINK_TCP_LANES INTERLINK_TORCH_ASYNC INTERLINK_TRANSPORT INTERLINK_TUNER INTERLINK_TRACE INTERLINK_HOST_COMPUTE
INTERLINK_NO_CCORE
""".split())

#: families of variables (INTERLINK_PEER_<NAME>: where benchmarks/compare.py finds an MPI)
KNOWN_INTERLINK_PREFIXES = ("INTERLINK_PEER_",)


def known_var(name: str) -> bool:
    return name in KNOWN_INTERLINK_VARS or any(name.startswith(p) for p in KNOWN_INTERLINK_PREFIXES)


SHM_WARN = 1 << 30
SHM_FAIL = 64 << 20


@dataclass
class Check:
    name: str
    status: str  # pass | warn | fail | info
    detail: str
    advice: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail, "advice": self.advice}


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def check_shm(root: str = "/dev/shm") -> list[Check]:
    out = []
    try:
        fd = os.memfd_create("interlink-doctor")
        try:
            os.ftruncate(fd, 1 << 16)
            a = mmap.mmap(fd, 1 << 16)
            b = mmap.mmap(fd, 1 << 16)
            a[:4] = b"ping"
            ok = b[:4] == b"ping"
            a.close()
            b.close()
        finally:
            os.close(fd)
        out.append(Check("transport shm", "pass" if ok else "fail", "memfd pages shared between two mappings"
                         if ok else "two mappings of one memfd do not share pages",
                         "" if ok else "the shm transport cannot work here; ranks will use tcp (INTERLINK_TRANSPORT=tcp)"))
    except (AttributeError, OSError) as e:
        out.append(Check("transport shm", "fail", f"memfd_create failed: {e}",
                         "ranks on this host fall back to tcp; run on Linux >= 3.17 with memfd"))
    try:
        st = shutil.disk_usage(root)
        free = st.free
        status = "pass" if free >= SHM_WARN else "warn" if free >= SHM_FAIL else "fail"
        out.append(Check("/dev/shm space", status, f"{free / 2**30:.1f} GiB free of {st.total / 2**30:.1f} GiB",
                         "" if status == "pass" else "interlink.empty arrays and shared pages live there: give the "
                         "container more (docker --shm-size=8g) or free it"))
    except OSError as e:
        out.append(Check("/dev/shm space", "warn", f"{root}: {e}", "mount a tmpfs at /dev/shm"))
    return out


def check_tcp() -> Check:
    try:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        c = socket.create_connection(srv.getsockname(), timeout=2)
        s, _ = srv.accept()
        c.sendall(b"x")
        ok = s.recv(1) == b"x"
        for x in (c, s, srv):
            x.close()
        return Check("transport tcp", "pass" if ok else "fail", "loopback connection carries bytes")
    except OSError as e:
        return Check("transport tcp", "fail", f"loopback TCP failed: {e}", "allow TCP on 127.0.0.1 (firewall, sandbox)")


def check_cma() -> Check:
    scope = _read("/proc/sys/kernel/yama/ptrace_scope")
    what = f"Yama ptrace_scope={scope}" if scope is not None else "no Yama LSM (ptrace_scope absent)"
    if os.environ.get("INTERLINK_CMA") == "0":
        return Check("cross-memory attach", "info", f"{what}; off by INTERLINK_CMA=0",
                     "large shared-memory messages take two copies through the ring")
    try:
        from ..transport import cma
    except Exception as e:  # noqa: BLE001
        return Check("cross-memory attach", "warn", f"{what}; cannot load the cma module: {e}")
    import numpy as np

    cma.allow_peers()  # what every rank does at init
    buf = np.arange(16, dtype=np.uint8)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reads the parent: a peer that is not its descendant, as ranks are
        ok = 0
        try:
            got = np.zeros(16, dtype=np.uint8)
            cma.read(os.getppid(), cma.address(buf), cma.address(got), 16)
            ok = int(bool((got == buf).all()))
        except BaseException:  # noqa: BLE001
            ok = 0
        os.write(w, bytes([ok]))
        os._exit(0)
    os.close(w)
    res = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    if res == b"\x01":
        return Check("cross-memory attach", "pass", f"{what}; a process read another's memory (process_vm_readv)")
    return Check("cross-memory attach", "warn", f"{what}; process_vm_readv between processes is refused",
                 "large messages between ranks on this host take two copies instead of one: set "
                 "kernel.yama.ptrace_scope=0 or 1 (sysctl), or run the container with --cap-add SYS_PTRACE")


def check_ccore() -> Check:
    """Whether the host page's one-shot path runs in its compiled core (runtime/ccore.py)."""
    from ..runtime import ccore

    if not ccore.built():
        return Check("compiled core", "info", ccore.status(),
                     "reinstall with a C compiler present (pip install -e .) for the faster small calls")
    return Check("compiled core", "pass" if ccore.enabled() else "info", ccore.status())


def check_interfaces() -> list[Check]:
    out = []
    base = "/sys/class/net"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return [Check("interfaces", "warn", "cannot list /sys/class/net")]
    rows = []
    up_fast = 0
    for n in names:
        state = _read(f"{base}/{n}/operstate") or "?"
        speed = _read(f"{base}/{n}/speed")
        try:
            mbit = int(speed) if speed is not None else -1
        except ValueError:
            mbit = -1
        if n == "lo":  # the kernel reports the loopback's operstate as "unknown": it has no link to be up
            rows.append("lo loopback (this host only)")
            continue
        rows.append(f"{n} {state}" + (f" {mbit / 1000:g} Gb/s" if mbit > 0 else ""))
        if n != "lo" and state == "up" and mbit >= 10000:
            up_fast += 1
    out.append(Check("interfaces", "info", "; ".join(rows) or "none",
                     "" if up_fast else "no interface reports >= 10 Gb/s: fine on one host; across hosts the link "
                     "bounds bandwidth (interlink topo shows what the model assumes)"))
    ifn = os.environ.get("INTERLINK_IFNAME")
    if ifn:
        bad = [x for x in ifn.split(",") if x and x not in names]
        out.append(Check("INTERLINK_IFNAME", "fail" if bad else "pass", f"{ifn}" + (f": no such interface {bad}" if bad else ""),
                         f"name interfaces of this host ({', '.join(names)})" if bad else ""))
    return out


def check_cores(ranks: Optional[int] = None) -> Check:
    try:
        ncpu = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        ncpu = os.cpu_count() or 1
    n = ranks or int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
    if not n:
        return Check("ranks per core", "info", f"{ncpu} cores available to this process",
                     "more ranks than cores on a host make every wait yield the core (pass --ranks N to check)")
    per = n / ncpu
    if per <= 1:
        return Check("ranks per core", "pass", f"{n} ranks on {ncpu} cores")
    return Check("ranks per core", "warn", f"{n} ranks on {ncpu} cores ({per:.1f} per core)",
                 "ranks share cores: small calls pay a context switch per wait (interlink adapts its spinning); "
                 "use fewer ranks per host or more cores")


def check_hugepages() -> Check:
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled") or "?"
    mode = thp[thp.find("[") + 1:thp.find("]")] if "[" in thp else thp
    total = 0
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("HugePages_Total:"):
            total = int(line.split()[1])
    detail = f"transparent huge pages: {mode}; reserved huge pages: {total}"
    if mode == "never":
        return Check("huge pages", "warn", detail, "large buffers fault 4 KiB pages: echo madvise > "
                                                   "/sys/kernel/mm/transparent_hugepage/enabled")
    return Check("huge pages", "pass", detail)


def check_torch_gpu() -> list[Check]:
    out = []
    try:
        import importlib.util

        has_torch = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        has_torch = False
    if not has_torch:
        out.append(Check("torch", "info", "not installed", "the torch.distributed backend needs it: pip install torch"))
    else:
        import torch

        cuda = bool(torch.cuda.is_available())
        n = torch.cuda.device_count() if cuda else 0
        out.append(Check("torch", "pass", f"torch {torch.__version__}; CUDA {'available, ' + str(n) + ' GPU(s)' if cuda else 'not available'}"))
    smi = shutil.which("nvidia-smi")
    nvml = False
    try:
        import importlib.util

        nvml = importlib.util.find_spec("pynvml") is not None
    except (ImportError, ValueError):
        pass
    if smi or nvml or os.path.exists("/dev/nvidiactl"):
        out.append(Check("GPU / NVML", "pass" if nvml else "warn",
                         f"nvidia-smi {'found' if smi else 'absent'}; NVML bindings {'found' if nvml else 'absent'}",
                         "" if nvml else "topology discovery of NVLink needs NVML: pip install nvidia-ml-py"))
    else:
        out.append(Check("GPU / NVML", "info", "no NVIDIA GPU driver on this host", "GPU paths are off; host paths run"))
    return out


def check_vars(environ: Optional[dict] = None) -> list[Check]:
    env = os.environ if environ is None else environ
    out = []
    il = sorted(k for k in env if k.startswith("INTERLINK_"))
    unknown = [k for k in il if not known_var(k)]
    shown = [f"{k}={'***' if 'SECRET' in k else env[k]}" for k in il]
    out.append(Check("INTERLINK_* variables", "warn" if unknown else "pass" if il else "info",
                     ", ".join(shown) if shown else "none set",
                     f"not a variable interlink reads: {', '.join(unknown)} (misspelt?)" if unknown else ""))
    nccl = sorted(k for k in env if k.startswith("NCCL_"))
    risky = [k for k in nccl if k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NVLS_ENABLE",
                                      "NCCL_ALGO", "NCCL_PROTO", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS")]
    out.append(Check("NCCL_* variables", "warn" if risky else "pass" if nccl else "info",
                     ", ".join(f"{k}={env[k]}" for k in nccl) if nccl else "none set",
                     f"{', '.join(risky)} change which paths or algorithms NCCL may use: a common cause of low busbw "
                     f"(interlink doctor nccl-tests prices what they cost)" if risky else ""))
    return out


def run_checks(ranks: Optional[int] = None) -> list[Check]:
    checks: list[Check] = []
    steps: list[Callable[[], object]] = [check_shm, check_tcp, check_cma, check_ccore, check_interfaces,
                                         lambda: check_cores(ranks), check_hugepages, check_torch_gpu, check_vars]
    for fn in steps:
        try:
            got = fn()
        except Exception as e:  # noqa: BLE001 - a check that breaks is itself a finding
            got = Check(getattr(fn, "__name__", "check"), "warn", f"the check failed: {type(e).__name__}: {e}")
        checks += got if isinstance(got, list) else [got]  # type: ignore[arg-type]
    return checks


def report(checks: list[Check], width: int = 100) -> str:
    """One line a check (status, name, what was found), its advice under it, wrapped to ``width`` columns."""
    import textwrap

    w = max(len(c.name) for c in checks)
    pad = " " * (4 + 2 + w + 2)
    lines = []
    for c in checks:
        lines += textwrap.wrap(c.detail, width, initial_indent=f"{c.status.upper():4s}  {c.name:{w}s}  ",
                               subsequent_indent=pad, break_long_words=False) or [f"{c.status.upper():4s}  {c.name}"]
        if c.advice:
            lines += textwrap.wrap(c.advice, width, initial_indent=pad + "-> ", subsequent_indent=pad + "   ",
                                   break_long_words=False)
    n = {s: sum(c.status == s for c in checks) for s in ("pass", "warn", "fail")}
    lines.append(f"{n['pass']} pass, {n['warn']} warn, {n['fail']} fail")
    return "\n".join(lines)
