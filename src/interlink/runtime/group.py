"""Communicators: the torch.distributed-style API over the executor.

Each call validates its arguments before any byte moves, takes the group's next sequence number,
picks an algorithm, fetches the (cached) Schedule and runs this rank's part of it. Every message
carries the call's signature, so ranks that call different collectives get CollectiveMismatchError
naming both sides. Any failure aborts the group on every rank (an ABORT frame on the control plane),
and the flight recorder's last calls are attached to timeout errors.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import time
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable, NoReturn, Optional, Sequence

import numpy as np

from .. import arrays, devices
from ..algorithms import registry
from ..algorithms.alltoallv import alltoallv_schedule
from ..algorithms.schedule import Schedule, two_sided
from ..errors import CommTimeoutError, InterlinkError
from ..ops import ReduceOp, check_op_dtype
from ..transport import cuda_ipc
from ..transport.base import HeaderMismatch, Op, encode_sig
from . import ccore, device_exec, recorder
from .engine import Aborted, Engine, translate
from ..model.tuner import (ALGORITHM_TABLE, SMALL_BYTES, default_algorithm, env_algorithm, env_channels,
                           parse_algo_env, schedule_channels, switch_points)
from .executor import Plan, alias_delta, execute
from .fastpath import A2A, AG, AR, BAR, BC, NAMES, RS
from .policy import DEVICE_ALGO, cma_threshold, cuda_ipc_min_bytes
from .work import Runner, Work

log = logging.getLogger("interlink")

RECORDER_SIZE = int(os.environ.get("INTERLINK_RECORDER", "32"))

# Default algorithm choice: the model's tuner (interlink.model.tuner) for the group's layout; this table
# when the model fails or INTERLINK_TUNER=table: preference lists per collective, small messages first.
# The first registered algorithm wins.
# the API names of the hot calls with an output
_CALL = {AG: "all_gather_into_tensor", RS: "reduce_scatter_tensor", A2A: "all_to_all_single"}

_PER_RANK_BLOCK = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})

_EMPTY = np.empty(0, dtype=np.uint8)  # the barrier's (absent) payload


@dataclass
class _Ctx:
    """Process-wide state shared by every group: the engine, the store, the runner."""

    rank: int
    world_size: int
    engine: Engine
    store: Any
    server: Any
    timeout: float
    runner: Runner = field(init=False)
    groups: int = 0
    p2p_sent: dict = field(default_factory=lambda: collections.defaultdict(int))
    p2p_recv: dict = field(default_factory=lambda: collections.defaultdict(int))
    broken: Optional[InterlinkError] = None
    fast: Any = None  # FastPath when every rank is on this host
    mesh_args: Any = None  # (job secret, master address, master port): what shrink connects the survivors with
    shrinks: int = 0  # shrink agreements run on this communicator (the epoch of their frames)
    conflict_sent: bool = False  # the ABORT of a rank conflict went out (api._on_conflict sends it once)


class Group:
    """A communicator over a subset of the world's ranks (group rank i = global rank ranks[i])."""

    def __init__(self, ctx: _Ctx, ranks: Sequence[int], name: str) -> None:
        self.ctx = ctx
        self.ranks = tuple(ranks)
        self.name = name
        self._index = {g: i for i, g in enumerate(self.ranks)}
        self.rank = self._index.get(ctx.rank, -1)
        self.size = len(self.ranks)
        self.seq = 0
        # the flight recorder: the last calls in preallocated lists (recorder.CallRing); a call writes its plan
        # and start into its slot, then its number when it is done (its lists bound here: no lookups a call)
        self.recorder = ring = recorder.CallRing(RECORDER_SIZE, lambda: self.seq)
        self._rmask, self._rplans, self._rstarts, self._rseqs, self._rends = (ring.mask, ring.plans, ring.starts,
                                                                             ring.seqs, ring.ends)
        self._plans: dict[tuple, Plan] = {}
        # the small-message fast path: the world group of a job whose ranks share one host
        self._fast = ctx.fast if name == "world" else None
        recorder.track(self)  # listed in this rank's flight-recorder dump (runtime/recorder.py)
        # per collective (indexed by the fast path's kinds): off where INTERLINK_ALGO names an algorithm for
        # that collective, which then runs its Schedule; the other collectives keep their fast paths
        forced = parse_algo_env(os.environ.get("INTERLINK_ALGO", ""))
        env_channels()  # a bad INTERLINK_CHANNELS is an error now, not at the first ring
        self._fk = tuple(None if NAMES[k] in forced else self._fast for k in range(len(NAMES)))
        self._layout: Optional[tuple[int, int]] = None
        # INTERLINK_DEBUG=TRACE: one log line per completed call (op, algorithm/path, dtype, count, time)
        self._trace = os.environ.get("INTERLINK_DEBUG", "").upper() == "TRACE"
        # the compiled core's fold of _hot and _call_small (runtime/ccore.py), None: the Python path
        self._cbind = ccore.bind(self)

    def __repr__(self) -> str:
        return f"Group({self.name}, rank {self.rank} of {self.size})"

    # torch-like accessors
    def get_rank(self) -> int:
        return self.rank

    def get_world_size(self) -> int:
        return self.size

    def host_layout(self) -> tuple[int, int]:
        """(hosts, ranks per host) when the group's ranks come in consecutive equal blocks per host
        (the last block may be smaller); (hosts, 1) otherwise, which disables hierarchical choices."""
        if self._layout is None:
            hosts = self.ctx.engine.hosts
            ids = [hosts[g] for g in self.ranks] if hosts else ["?"] * self.size
            blocks: list[tuple[str, int]] = []
            for h in ids:
                if blocks and blocks[-1][0] == h:
                    blocks[-1] = (h, blocks[-1][1] + 1)
                else:
                    blocks.append((h, 1))
            distinct = len({h for h, _ in blocks})
            sizes = [n for _, n in blocks]
            if distinct == len(blocks) and all(n == sizes[0] for n in sizes[:-1]) and sizes[-1] <= sizes[0]:
                self._layout = (len(blocks), sizes[0])
            else:
                self._layout = (distinct, 1)
        return self._layout

    def nics(self) -> int:
        """The fewest NICs any rank of the group published at init (INTERLINK_IFNAME's list; 1 when
        unknown or when the group is on one host): what the tuner models its hosts with, and the ring
        channels it gives a group spanning hosts."""
        got = self.ctx.engine.nics
        if not got or self.host_layout()[0] <= 1:
            return 1
        return max(1, min((got[g] for g in self.ranks), default=1))

    # ---- a lost rank --------------------------------------------------------------------------
    def shrink(self, exclude: Optional[Sequence[int]] = None, timeout: Optional[float] = None) -> "Group":
        """The survivors as a new group (ranks 0 .. n-1 in the order of their ranks here), on connections
        of their own: every rank of this group but the excluded ones calls it. ``exclude``: this group's
        ranks to leave out; None (after a PeerLostError): the survivors agree on who is lost (each proposes
        the ranks it knows gone, they take the union). The new group's ``parent_ranks`` are its ranks'
        ranks here, ``lost`` the ranks left out. Shrinking the world closes the old communicator (its other
        groups raise from then on) and the module-level calls go to the new world. The call that failed
        is undefined on the survivors: redo it. runtime/shrink.py, docs/faults.md."""
        from .shrink import shrink

        return shrink(self, exclude, timeout)

    def lost_ranks(self, timeout: Optional[float] = None) -> list[int]:
        """The ranks of this group that every survivor agrees are lost (every survivor calls it, e.g. after a
        PeerLostError): what to pass to torch.distributed.shrink_group, or to shrink(exclude=...)."""
        from .shrink import lost_ranks

        return lost_ranks(self, timeout)

    # ---- plumbing ----------------------------------------------------------------------------
    def path_thresholds(self) -> dict[str, int]:
        """Every size (bytes) at which this group's runtime changes how a call moves its bytes: the
        shared-page paths' limits (all-local world), the transports' (one-copy threshold per collective,
        ring slot size) and the algorithm choice's switch points per collective (where the default
        algorithm changes, found by scanning the policy itself). A new threshold in any of them shows up
        here without the callers (the differential tests, the soak) being edited."""
        from .policy import ring_params

        out: dict[str, int] = {}
        if self._fast is not None:
            out.update(self._fast.thresholds())
        slot, nslots = ring_params()
        out["shm.slot"] = slot
        out["shm.ring"] = slot * nslots
        out["small"] = SMALL_BYTES
        out["cuda_ipc.min"] = cuda_ipc_min_bytes()  # device arrays: staged below, cuda-ipc from here
        layout = self.host_layout()
        for c in ALGORITHM_TABLE:
            if c != "barrier":
                out[f"cma.{c}"] = cma_threshold(c)
            for i, b in enumerate(switch_points(c, self.size, layout, nics=self.nics())):
                out[f"algo.{c}.{i}"] = b
        return out

    def _check_usable(self, op: str) -> None:
        if self.ctx.broken is not None:
            raise type(self.ctx.broken)(
                f"the communicator is unusable after an earlier failure: {self.ctx.broken.message}",
                op=op, group=self.name, seq=self.seq + 1, ranks=self.ctx.broken.ranks)
        if self.rank < 0:
            raise ValueError(f"rank {self.ctx.rank} is not a member of group {self.name} {list(self.ranks)}")

    def _rank_arg(self, r: int, what: str) -> int:
        if not isinstance(r, (int, np.integer)) or not 0 <= int(r) < self.size:
            raise ValueError(f"{what}={r} is out of range for group {self.name} of size {self.size}")
        return int(r)

    def _fail(self, exc: BaseException, op: str, seq: int) -> InterlinkError:
        err = translate(exc, op=op, group=self.name, seq=seq, rank=self.ctx.rank, engine=self.ctx.engine)
        if isinstance(err, CommTimeoutError) and self.recorder:
            err.args = (err.args[0] + "\n" + self.flight_record(),)
        self.ctx.broken = err
        if isinstance(exc, Aborted):
            # pass the root cause on: a peer that sees this rank exit must read why before the EOF
            self.ctx.engine.send_abort(exc.info)
        else:
            self.ctx.engine.send_abort({"error": type(err).__name__, "message": err.message,
                                        "ranks": list(err.ranks)})
        recorder.failed(self, seq, exc, err)  # what the call waited for; the dump (INTERLINK_DUMP_DIR)
        return err

    def flight_record(self) -> str:
        lines = [f"last {len(self.recorder)} calls of rank {self.ctx.rank} in group {self.name}:"]
        for rec in self.recorder:
            lines.append(f"  #{rec.seq} {rec.sig}: {rec.state}"
                         + (f" in {rec.duration * 1e3:.2f} ms" if rec.duration is not None else ""))
        return "\n".join(lines)

    def _plan(self, collective: str, count: int, root: int, dtype: np.dtype, op: ReduceOp,
              algorithm: Optional[str], alias: Optional[int], sig_extra: str = "",
              schedule: Optional[Schedule] = None, device: bool = False) -> Any:
        key = (collective, count, root, dtype, op, algorithm, alias, device)
        plan = self._plans.get(key) if schedule is None else None
        if plan is not None:
            return plan
        if schedule is None:
            nbytes = count * dtype.itemsize * (self.size if collective in _PER_RANK_BLOCK else 1)
            nhosts, local_size = self.host_layout()
            algo = algorithm or env_algorithm(collective)
            if algo is None and device:
                algo = DEVICE_ALGO[collective]
            if algo is None:
                algo = default_algorithm(collective, nbytes, self.size, (nhosts, local_size), self.nics())
            params: dict[str, Any] = {}
            eparams = registry.get_entry(collective, algo).params
            if "exits" in eparams:
                params.update(schedule_channels(algo, self.nics(), nhosts, local_size))
            elif "local_size" in eparams:
                params["local_size"] = local_size if nhosts > 1 else self.size
            schedule = registry.get_schedule(collective, algo, self.size, count, root, **params)
        sig = (f"{collective}:{schedule.algorithm} {dtype} n={count} {op.name.lower()} root={root} "
               f"{self.name}{sig_extra}{' cuda-ipc' if device else ''}")
        if device:
            plan = device_exec.DevicePlan(schedule, self.rank, dtype, op, alias, self.ranks.__getitem__, sig)
        else:  # the rings and TCP have no one-sided reads: a Schedule's Gets run as Send/Recv pairs
            plan = Plan(two_sided(schedule), self.rank, dtype, op, alias, self.ranks.__getitem__, sig,
                        self.ctx.engine.nlanes)
        if len(self._plans) > 512:
            self._plans.clear()
        if sig_extra == "":
            self._plans[key] = plan
        return plan

    def _execute(self, collective: str, sig_extra: str, count: int, root: int, dtype: np.dtype,
                 op: ReduceOp, bufs: dict[str, np.ndarray], algorithm: Optional[str],
                 timeout: Optional[float], schedule: Optional[Schedule] = None,
                 finish: Optional[Callable[[], None]] = None, device: bool = False) -> None:
        """Run one collective. Called inline or on the runner thread, in call order. ``device``: the
        buffers are cuda_ipc.DevBufs and the device executor runs the Schedule (cuda-ipc)."""
        self._check_usable(collective)
        self.seq += 1
        seq = self.seq
        inp, out = bufs["input"], bufs["output"]
        try:
            plan = self._plan(collective, count, root, dtype, op, algorithm,
                              _dev_alias(inp, out) if device else alias_delta(inp, out), sig_extra, schedule,
                              device)
        except ValueError:
            self.seq -= 1  # e.g. unknown algorithm: nothing was sent
            raise
        i = seq & self._rmask  # the flight recorder's slot of this call
        self._rplans[i] = plan
        self._rstarts[i] = t0 = perf_counter()
        deadline = time.monotonic() + (timeout if timeout is not None else self.ctx.timeout)
        try:
            if device:
                device_exec.execute(plan, self.ctx.engine, inp, out, seq, deadline)
            else:
                execute(plan, self.ctx.engine, inp, out, seq, deadline)
            if finish is not None:
                finish()
        except InterlinkError:
            self.recorder.failed.add(seq)
            raise
        except BaseException as e:
            self.recorder.failed.add(seq)
            if isinstance(e, (KeyboardInterrupt, MemoryError)):
                raise
            raise self._fail(e, collective, seq) from None
        self._rends[i] = t1 = perf_counter()
        self._rseqs[i] = seq  # done
        if self._trace:
            self._log_call(seq, plan, t1 - t0)

    def _log_call(self, seq: int, plan: Any, seconds: float) -> None:
        log.debug("trace rank %d %s #%d %s: %.1f us", self.ctx.rank, self.name, seq,
                  plan.sigb.decode(errors="replace"), seconds * 1e6)

    def _run_fast(self, collective: str, a: np.ndarray, op: ReduceOp, root: int, timeout: Optional[float],
                  out: Optional[np.ndarray] = None) -> None:
        """A call through the host page from the regular entry (async, staged device arrays, an explicit
        timeout): flat arrays, already validated."""
        kind = NAMES.index(collective)
        key = (kind, a.dtype, a.shape, None if out is None else out.shape, op, root, "flat")
        sc = self._fast.shapes.get(key)
        if sc is None:
            sc = self._fast.remember(key, self._fast.small(kind, a, out, op, root, self.name))
        self._call_small(kind, sc, a, out, timeout)

    def _hot(self, kind: int, a: np.ndarray, out: Optional[np.ndarray], op: Any, root: Any) -> bool:
        """The latency path of an all-local world: a synchronous call on numpy arrays that fit one shared
        slot runs FastPath.hot with views and a signature cached by the call's shape. False when the call
        is not for it (the caller takes the regular path, which also raises on bad input). With the
        compiled core, a cached shape it takes runs _hot and _call_small in one C call (_finish_core: the
        rest of a call it hands back). runtime/api.py's module-level calls on the world group take these
        steps without this frame (the core's Entry, else _hot_py): a change here is made there too."""
        cb = self._cbind
        if cb is not None:
            r = cb.call(self, kind, a, out, op, root)
            if r is None:
                return True
            if r is not NotImplemented:
                self._finish_core(kind, r, a, out)
                return True
        return self._hot_py(kind, a, out, op, root)

    def _hot_py(self, kind: int, a: np.ndarray, out: Optional[np.ndarray], op: Any, root: Any) -> bool:
        """_hot without the compiled core: the shape's cache entry (made and validated on its first call),
        then FastPath.hot under the runner's lock."""
        fast = self._fast
        ctx = self.ctx
        if ctx.broken is not None:
            return False
        flags = a.flags
        if not flags.c_contiguous or ((kind == AR or kind == BC) and not flags.writeable):
            return False
        if out is not None:
            if type(out) is not np.ndarray:
                return False
            flags = out.flags
            if not flags.c_contiguous or not flags.writeable:
                return False
            key = (kind, a.dtype, a.shape, out.dtype, out.shape, op, root)
        else:
            key = (kind, a.dtype, a.shape, op, root)
        try:
            sc = fast.shapes.get(key)
        except TypeError:  # an unhashable op object: the regular path parses it
            return False
        if sc is None:
            sc = self._hot_small(kind, a, out, op, root, key)
        runner = ctx.runner
        if not sc or runner._pending:
            return False
        if out is not None and np.may_share_memory(a, out):  # in place, or an overlap the contract refuses
            arrays.check_overlap(_CALL[kind], NAMES[kind], a.reshape(-1), out.reshape(-1), self.rank)
        with runner._exec:
            self._call_small(kind, sc, a, out, None)
        return True

    def _call_small(self, kind: int, sc: Any, a: np.ndarray, out: Optional[np.ndarray],
                    timeout: Optional[float]) -> None:
        if self.ctx.broken is not None:
            self._check_usable(NAMES[kind])
        self.seq = seq = self.seq + 1
        tn = sc.tune
        if tn is not None:  # a shape whose path this host measures: this call's path (FastPath.pick)
            sc = self._fast.pick(tn)
        i = seq & self._rmask  # the flight recorder's slot of this call: plan and start, then done (no end time)
        self._rplans[i] = sc
        self._rstarts[i] = t0 = perf_counter()
        try:
            self._fast.hot(sc, a, out, seq, self.ctx.timeout if timeout is None else timeout)
        except BaseException as e:
            self._small_failed(e, kind, seq)
        self._rseqs[i] = seq
        if tn is not None:
            self._fast.timed(tn, perf_counter() - t0)
        if self._trace:
            self._log_call(seq, sc, perf_counter() - t0)

    def _finish_core(self, kind: int, r: tuple, a: np.ndarray, out: Optional[np.ndarray]) -> None:
        """The rest of a call that the compiled core took (its runner's lock held, its number and recorder
        slot taken) and handed back: the slot was not free yet (code 1: the whole call here) or the peers'
        headers were not all there or did not match (code 2: published; wait and check here); a page program
        the core ran (Small.cprog) stopped at its peers' headers (code 3) or before round ``rnd`` (code 4),
        and PageProgram._program goes on from there. The end of _call_small."""
        code, sc, seq, i, f, pos, rnd = r
        try:
            try:
                if code == 1:
                    self._fast.hot(sc, a, out, seq, self.ctx.timeout)
                elif code == 2:
                    self._fast._resume(sc, a, out, f, pos, seq, self.ctx.timeout)
                else:  # a page program (Small.cprog): 3 published, 4 from round rnd
                    self._fast._program(sc, a, out, f, pos, seq, self.ctx.timeout, resume=(code - 3, rnd))
            except BaseException as e:
                self._small_failed(e, kind, seq)
            self._rseqs[i] = seq
        finally:
            self.ctx.runner._exec.release()

    def _small_failed(self, e: BaseException, kind: int, seq: int) -> NoReturn:
        """A host-page call failed (in _call_small or after the compiled core): recorded as failed, then
        raised as the typed error naming the call (KeyboardInterrupt and MemoryError as they are)."""
        self.recorder.failed.add(seq)
        if isinstance(e, (KeyboardInterrupt, MemoryError)):
            raise e
        raise self._fail(e, NAMES[kind], seq) from None

    def _hot_small(self, kind: int, a: np.ndarray, out: Optional[np.ndarray], op: Any, root: Any,
                   key: tuple) -> Any:
        """Validate the first call of a shape for the hot path; cache a Small, or False when the call is
        not for it (too large, empty, or a mismatch of sizes the regular path reports)."""
        fast = self._fast
        inp = arrays.as_flat(a, "tensor", writable=False, reducing=kind in (AR, RS))
        rop = ReduceOp.SUM
        fits = fast.takes(kind, inp.nbytes) and (inp.nbytes > 0 or kind == BAR)
        if kind in (AR, RS):
            rop = self._reduce_op(op, inp.dtype)
        elif kind == BC:
            root = self._rank_arg(root, "src")
        if kind == BAR:
            fits = True
        elif out is not None:
            o = arrays.as_flat(out, "output", reducing=kind == RS)
            fits = fits and o.dtype == inp.dtype and (
                o.size == inp.size * self.size if kind == AG else
                o.size == inp.size and inp.size % self.size == 0 if kind == A2A else o.size * self.size == inp.size)
        return fast.remember(key, fast.small(kind, a, out, rop, int(root), self.name) if fits else False)

    def _submit(self, fn: Callable[[], None], desc: str, async_op: bool) -> Optional[Work]:
        if async_op:
            return self.ctx.runner.submit(fn, desc)
        self.ctx.runner.run_sync(fn, desc)
        return None

    @staticmethod
    def _reduce_op(op: Any, dtype: np.dtype) -> ReduceOp:
        try:
            return _check_op_dtype_cached(op, dtype)
        except TypeError as e:
            if "unhashable" in str(e):
                return check_op_dtype(op, dtype)
            raise

    # ---- the device path (cuda-ipc) -----------------------------------------------------------
    def _dev(self, *args: tuple) -> Optional[list]:
        """DevBufs of a call whose arrays are all CUDA arrays of one kind, in a group whose ranks share
        this host, with cuda-ipc on and the call at least cuda_ipc_min_bytes(); None: the staged path.
        Each arg is (array, name, writable, reducing); bad arrays raise here, before any byte moves.
        The call's device work goes on the caller's current stream (after what produced the inputs)."""
        kinds = set()
        for x, *_ in args:
            k = None if type(x) is np.ndarray else cuda_ipc.device_kind(x)
            if k is None:
                return None
            kinds.add(k)
        if len(kinds) > 1 or not cuda_ipc.enabled() or not self._local():
            return None
        be = cuda_ipc.backend(kinds.pop())
        if not be.available():
            return None
        bufs = [be.as_devbuf(x, name, w, r) for x, name, w, r in args]
        if max(b.nbytes for b in bufs) < cuda_ipc_min_bytes() or len({b.device for b in bufs}) > 1:
            return None
        stream = be.current_stream(bufs[0])
        for b in bufs:
            b.stream = stream
        return bufs

    def _local(self) -> bool:
        """Every rank of the group is on this host (the hosts exchanged at init)."""
        hosts = self.ctx.engine.hosts
        if not hosts:
            return True
        me = hosts[self.ctx.rank]
        return all(hosts[g] == me for g in self.ranks)

    def _run_dev(self, collective: str, count: int, root: int, op: ReduceOp, inp: Any, out: Any,
                 algorithm: Optional[str], timeout: Optional[float], async_op: bool) -> Optional[Work]:
        fn = lambda: self._execute(collective, "", count, root, out.dtype, op, {"input": inp, "output": out},
                                   algorithm, timeout, device=True)
        return self._submit(fn, f"{collective} #{self.seq + 1} in {self.name}", async_op)

    # ---- collectives -------------------------------------------------------------------------
    def all_reduce(self, tensor: Any, op: Any = ReduceOp.SUM, async_op: bool = False,
                   algorithm: Optional[str] = None, timeout: Optional[float] = None) -> Optional[Work]:
        if self._fk[AR] is not None and type(tensor) is np.ndarray and not (async_op or algorithm or timeout) \
                and self._hot(AR, tensor, None, op, 0):
            return None
        return self._all_reduce(tensor, op, async_op, algorithm, timeout)

    def _all_reduce(self, tensor: Any, op: Any, async_op: bool, algorithm: Optional[str],
                    timeout: Optional[float]) -> Optional[Work]:
        """all_reduce past the latency path (interlink.all_reduce comes here after Group._hot declined)."""
        self._check_usable("all_reduce")
        dv = None if type(tensor) is np.ndarray else self._dev((tensor, "tensor", True, True))
        if dv is not None:
            d = dv[0]
            return self._run_dev("all_reduce", d.size, 0, self._reduce_op(op, d.dtype), d, d, algorithm, timeout,
                                 async_op)
        if type(tensor) is np.ndarray:
            a, st = arrays.as_flat(tensor, "tensor", reducing=True), None
        else:
            st = devices.Staging()
            a = st.flat(tensor, "tensor", reducing=True)
        rop = self._reduce_op(op, a.dtype)
        if algorithm is None and self._fk[AR] is not None and self._fast.takes(AR, a.nbytes):
            if not async_op:
                self.ctx.runner.run_sync_call(self._run_fast, "all_reduce", a, rop, 0, timeout)
                if st is not None:
                    st.upload()
                return None
            fn = lambda: self._run_fast("all_reduce", a, rop, 0, timeout)
        else:
            fn = lambda: self._execute("all_reduce", "", a.size, 0, a.dtype, rop, {"input": a, "output": a},
                                       algorithm, timeout)
        return self._submit(fn if st is None else st.wrap(fn), f"all_reduce #{self.seq + 1} in {self.name}", async_op)

    def broadcast(self, tensor: Any, src: int = 0, async_op: bool = False, algorithm: Optional[str] = None,
                  timeout: Optional[float] = None) -> Optional[Work]:
        if self._fk[BC] is not None and type(tensor) is np.ndarray and not (async_op or algorithm or timeout) \
                and self._hot(BC, tensor, None, None, src):
            return None
        return self._broadcast(tensor, src, async_op, algorithm, timeout)

    def _broadcast(self, tensor: Any, src: int, async_op: bool, algorithm: Optional[str],
                   timeout: Optional[float]) -> Optional[Work]:
        """broadcast past the latency path."""
        self._check_usable("broadcast")
        root = self._rank_arg(src, "src")
        dv = self._dev((tensor, "tensor", True, False))
        if dv is not None:
            d = dv[0]
            _dtype_ok(d.dtype)
            return self._run_dev("broadcast", d.size, root, ReduceOp.SUM, d, d, algorithm, timeout, async_op)
        st = devices.Staging()
        # only the root's data matters: other ranks' device arrays are not downloaded
        a = st.flat(tensor, "tensor", download=(self.rank == root))
        _dtype_ok(a.dtype)
        if algorithm is None and self._fk[BC] is not None and self._fast.takes(BC, a.nbytes):
            fn = lambda: self._run_fast("broadcast", a, ReduceOp.SUM, root, timeout)
        else:
            fn = lambda: self._execute("broadcast", "", a.size, root, a.dtype, ReduceOp.SUM,
                                       {"input": a, "output": a}, algorithm, timeout)
        return self._submit(st.wrap(fn), "broadcast", async_op)

    def reduce(self, tensor: Any, dst: int = 0, op: Any = ReduceOp.SUM, async_op: bool = False,
               algorithm: Optional[str] = None, timeout: Optional[float] = None) -> Optional[Work]:
        self._check_usable("reduce")
        root = self._rank_arg(dst, "dst")
        dv = self._dev((tensor, "tensor", True, True))
        if dv is not None:
            d = dv[0]
            rop = self._reduce_op(op, d.dtype)
            o = d if self.rank == root else cuda_ipc.backend(d.kind).empty_like(d)  # non-root: untouched
            o.stream = d.stream
            return self._run_dev("reduce", d.size, root, rop, d, o, algorithm, timeout, async_op)
        st = devices.Staging()
        a = st.flat(tensor, "tensor", reducing=True, upload=(self.rank == root))
        rop = self._reduce_op(op, a.dtype)
        out = a if self.rank == root else np.empty_like(a)  # non-root tensors stay untouched
        fn = lambda: self._execute("reduce", "", a.size, root, a.dtype, rop, {"input": a, "output": out},
                                   algorithm, timeout)
        return self._submit(st.wrap(fn), "reduce", async_op)

    def all_gather_into_tensor(self, output_tensor: Any, input_tensor: Any, async_op: bool = False,
                               algorithm: Optional[str] = None, timeout: Optional[float] = None) -> Optional[Work]:
        if self._fk[AG] is not None and type(input_tensor) is np.ndarray and not (async_op or algorithm or timeout) \
                and self._hot(AG, input_tensor, output_tensor, None, 0):
            return None
        return self._all_gather_into_tensor(output_tensor, input_tensor, async_op, algorithm, timeout)

    def _all_gather_into_tensor(self, output_tensor: Any, input_tensor: Any, async_op: bool,
                                algorithm: Optional[str], timeout: Optional[float]) -> Optional[Work]:
        """all_gather_into_tensor past the latency path."""
        self._check_usable("all_gather")
        dv = self._dev((output_tensor, "output_tensor", True, False), (input_tensor, "input_tensor", False, False))
        if dv is not None:
            o, i = dv
            _same_dtype(o, i, "all_gather_into_tensor")
            _check_sizes("all_gather", i.size, o.size, self.size)
            arrays.check_overlap_at("all_gather_into_tensor", "all_gather", i.ptr, i.size, o.ptr, o.size,
                                    i.dtype.itemsize, self.rank)
            return self._run_dev("all_gather", i.size, 0, ReduceOp.SUM, i, o, algorithm, timeout, async_op)
        st = devices.Staging()
        out = st.flat(output_tensor, "output_tensor", download=False)
        inp = st.flat(input_tensor, "input_tensor", writable=False)
        _same_dtype(out, inp, "all_gather_into_tensor")
        _check_sizes("all_gather", inp.size, out.size, self.size)
        arrays.check_overlap("all_gather_into_tensor", "all_gather", inp, out, self.rank)
        if algorithm is None and self._fk[AG] is not None and self._fast.takes(AG, inp.nbytes):
            fn = lambda: self._run_fast("all_gather", inp, ReduceOp.SUM, 0, timeout, out)
        else:
            fn = lambda: self._execute("all_gather", "", inp.size, 0, inp.dtype, ReduceOp.SUM,
                                       {"input": inp, "output": out}, algorithm, timeout)
        return self._submit(st.wrap(fn), "all_gather", async_op)

    def all_gather(self, tensor_list: list, tensor: Any, async_op: bool = False,
                   algorithm: Optional[str] = None, timeout: Optional[float] = None) -> Optional[Work]:
        """torch's list form: tensor_list[i] receives rank i's tensor."""
        self._check_usable("all_gather")
        st = devices.Staging()
        inp = st.flat(tensor, "tensor", writable=False)
        outs = _check_list(tensor_list, self.size, inp, "tensor_list", staging=st)
        buf = np.empty(inp.size * self.size, dtype=inp.dtype)

        def finish() -> None:
            for i, o in enumerate(outs):
                o[...] = buf[i * inp.size:(i + 1) * inp.size]

        fn = lambda: self._execute("all_gather", "", inp.size, 0, inp.dtype, ReduceOp.SUM,
                                   {"input": inp, "output": buf}, algorithm, timeout, finish=finish)
        return self._submit(st.wrap(fn), "all_gather", async_op)

    def reduce_scatter_tensor(self, output: Any, input: Any, op: Any = ReduceOp.SUM, async_op: bool = False,
                              algorithm: Optional[str] = None, timeout: Optional[float] = None) -> Optional[Work]:
        if self._fk[RS] is not None and type(input) is np.ndarray and not (async_op or algorithm or timeout) \
                and self._hot(RS, input, output, op, 0):
            return None
        return self._reduce_scatter_tensor(output, input, op, async_op, algorithm, timeout)

    def _reduce_scatter_tensor(self, output: Any, input: Any, op: Any, async_op: bool, algorithm: Optional[str],
                               timeout: Optional[float]) -> Optional[Work]:
        """reduce_scatter_tensor past the latency path."""
        self._check_usable("reduce_scatter")
        dv = self._dev((output, "output", True, True), (input, "input", False, True))
        if dv is not None:
            o, i = dv
            _same_dtype(o, i, "reduce_scatter_tensor")
            rop = self._reduce_op(op, o.dtype)
            _check_sizes("reduce_scatter", i.size, o.size, self.size)
            arrays.check_overlap_at("reduce_scatter_tensor", "reduce_scatter", i.ptr, i.size, o.ptr, o.size,
                                    i.dtype.itemsize, self.rank)
            return self._run_dev("reduce_scatter", o.size, 0, rop, i, o, algorithm, timeout, async_op)
        st = devices.Staging()
        out = st.flat(output, "output", reducing=True, download=False)
        inp = st.flat(input, "input", writable=False, reducing=True)
        _same_dtype(out, inp, "reduce_scatter_tensor")
        rop = self._reduce_op(op, out.dtype)
        _check_sizes("reduce_scatter", inp.size, out.size, self.size)
        arrays.check_overlap("reduce_scatter_tensor", "reduce_scatter", inp, out, self.rank)
        if algorithm is None and self._fk[RS] is not None and self._fast.takes(RS, inp.nbytes):
            fn = lambda: self._run_fast("reduce_scatter", inp, rop, 0, timeout, out)
        else:
            fn = lambda: self._execute("reduce_scatter", "", out.size, 0, out.dtype, rop,
                                       {"input": inp, "output": out}, algorithm, timeout)
        return self._submit(st.wrap(fn), "reduce_scatter", async_op)

    def gather(self, tensor: Any, gather_list: Optional[list] = None, dst: int = 0, async_op: bool = False,
               algorithm: Optional[str] = None, timeout: Optional[float] = None) -> Optional[Work]:
        self._check_usable("gather")
        root = self._rank_arg(dst, "dst")
        st = devices.Staging()
        inp = st.flat(tensor, "tensor", writable=False)
        _dtype_ok(inp.dtype)
        outs = _check_list(gather_list, self.size, inp, "gather_list", staging=st) if self.rank == root else None
        if self.rank != root and gather_list:
            raise ValueError(f"gather: gather_list must be None on non-destination rank {self.rank}")
        buf = np.empty(inp.size * self.size if self.rank == root else 0, dtype=inp.dtype)
        bufs = {"input": inp, "output": buf if self.rank == root else np.empty(inp.size * self.size, inp.dtype)}

        def finish() -> None:
            if outs is not None:
                for i, o in enumerate(outs):
                    o[...] = bufs["output"][i * inp.size:(i + 1) * inp.size]

        fn = lambda: self._execute("gather", "", inp.size, root, inp.dtype, ReduceOp.SUM, bufs, algorithm,
                                   timeout, finish=finish)
        return self._submit(st.wrap(fn), "gather", async_op)

    def scatter(self, tensor: Any, scatter_list: Optional[list] = None, src: int = 0, async_op: bool = False,
                algorithm: Optional[str] = None, timeout: Optional[float] = None) -> Optional[Work]:
        self._check_usable("scatter")
        root = self._rank_arg(src, "src")
        st = devices.Staging()
        out = st.flat(tensor, "tensor", download=False)
        _dtype_ok(out.dtype)
        if self.rank == root:
            ins = _check_list(scatter_list, self.size, out, "scatter_list", writable=False, staging=st)
            inp = np.concatenate(ins) if ins else np.empty(0, out.dtype)
        else:
            if scatter_list:
                raise ValueError(f"scatter: scatter_list must be None on non-source rank {self.rank}")
            inp = np.empty(out.size * self.size, dtype=out.dtype)
        fn = lambda: self._execute("scatter", "", out.size, root, out.dtype, ReduceOp.SUM,
                                   {"input": inp, "output": out}, algorithm, timeout)
        return self._submit(st.wrap(fn), "scatter", async_op)

    def all_to_all_single(self, output: Any, input: Any, output_split_sizes: Optional[Sequence[int]] = None,
                          input_split_sizes: Optional[Sequence[int]] = None, async_op: bool = False,
                          algorithm: Optional[str] = None, timeout: Optional[float] = None) -> Optional[Work]:
        if self._fk[A2A] is not None and output_split_sizes is None and input_split_sizes is None \
                and type(input) is np.ndarray and not (async_op or algorithm or timeout) \
                and self._hot(A2A, input, output, None, 0):
            return None
        return self._all_to_all_single(output, input, output_split_sizes, input_split_sizes, async_op, algorithm,
                                       timeout)

    def _all_to_all_single(self, output: Any, input: Any, output_split_sizes: Optional[Sequence[int]],
                           input_split_sizes: Optional[Sequence[int]], async_op: bool, algorithm: Optional[str],
                           timeout: Optional[float]) -> Optional[Work]:
        """all_to_all_single past the latency path."""
        self._check_usable("all_to_all")
        dv = None if (output_split_sizes is not None or input_split_sizes is not None) else \
            self._dev((output, "output", True, False), (input, "input", False, False))
        if dv is not None:
            o, i = dv
            _same_dtype(o, i, "all_to_all_single")
            _check_sizes("all_to_all", i.size, o.size, self.size)
            arrays.check_overlap_at("all_to_all_single", "all_to_all", i.ptr, i.size, o.ptr, o.size,
                                    i.dtype.itemsize, self.rank)
            return self._run_dev("all_to_all", i.size // self.size, 0, ReduceOp.SUM, i, o, algorithm, timeout,
                                 async_op)
        st = devices.Staging()
        out = st.flat(output, "output", download=(output_split_sizes is not None or input_split_sizes is not None))
        inp = st.flat(input, "input", writable=False)
        _same_dtype(out, inp, "all_to_all_single")
        p = self.size
        shape0 = _dim0(input)
        row = inp.size // shape0 if shape0 else 1
        oshape0 = _dim0(output)
        orow = out.size // oshape0 if oshape0 else 1
        arrays.check_overlap("all_to_all_single", "all_to_all", inp, out, self.rank)
        if output_split_sizes is None and input_split_sizes is None:
            _check_sizes("all_to_all", inp.size, out.size, p)
            n = inp.size // p
            if algorithm is None and self._fk[A2A] is not None and self._fast.takes(A2A, inp.nbytes):
                fn = lambda: self._run_fast("all_to_all", inp, ReduceOp.SUM, 0, timeout, out)
            else:
                fn = lambda: self._execute("all_to_all", "", n, 0, inp.dtype, ReduceOp.SUM,
                                           {"input": inp, "output": out}, algorithm, timeout)
            return self._submit(st.wrap(fn), "all_to_all", async_op)
        isplit = _splits(input_split_sizes, shape0, p, "input_split_sizes")
        osplit = _splits(output_split_sizes, oshape0, p, "output_split_sizes")
        sched = alltoallv_schedule(p, self.rank, [s * row for s in isplit], [s * orow for s in osplit],
                                    inp.size, out.size)
        fn = lambda: self._execute("all_to_all", " v", 0, 0, inp.dtype, ReduceOp.SUM,
                                   {"input": inp, "output": out}, None, timeout, schedule=sched)
        return self._submit(st.wrap(fn), "all_to_all", async_op)

    def barrier(self, async_op: bool = False, timeout: Optional[float] = None) -> Optional[Work]:
        if self._fk[BAR] is not None and not (async_op or timeout) and self._hot(BAR, _EMPTY, None, None, 0):
            return None
        self._check_usable("barrier")
        z = np.empty(0, dtype=np.uint8)
        if self._fk[BAR] is not None:
            fn = lambda: self._run_fast("barrier", z, ReduceOp.SUM, 0, timeout)
        else:
            fn = lambda: self._execute("barrier", "", 0, 0, z.dtype, ReduceOp.SUM, {"input": z, "output": z},
                                       None, timeout)
        return self._submit(fn, "barrier", async_op)

    # ---- point to point ----------------------------------------------------------------------
    def _p2p_op(self, kind: str, tensor: Any, peer: int, tag: int,
                st: Optional["devices.Staging"] = None, queued: bool = False) -> tuple[Op, int]:
        """The op of a send or receive. A queued receive gets its per-pair sequence number when it runs
        (run_p2p_batch), not when it is posted: a receive from any rank queued before it takes its number
        only when it runs, and the numbers must follow the order the receives match messages in."""
        peer = self._rank_arg(peer, "dst" if kind == "send" else "src")
        if peer == self.rank:
            raise ValueError(f"{kind} to itself (rank {self.rank}) is not supported")
        if st is None:
            a = arrays.as_flat(tensor, "tensor", writable=(kind == "recv"))
        else:
            a = st.flat(tensor, "tensor", writable=(kind == "recv"), download=(kind == "send"))
        g = self.ranks[peer]
        book = self.ctx.p2p_sent if kind == "send" else self.ctx.p2p_recv
        if queued and kind == "recv":
            seq = -1  # numbered in run_p2p_batch, in the order the receives run
        else:
            book[g] += 1
            seq = book[g]
        sigb = _p2p_sig(a.dtype, a.size, self.name)
        # a send from the policy's cross-memory threshold on lets the receiver read it in place (one copy);
        # below it the message goes eagerly through the ring and the send completes without the receiver
        op = Op(kind, g, a.view(np.uint8), seq, int(tag), sigb, None, cma_threshold() if kind == "send" else 0)
        return op, g

    def isend(self, tensor: Any, dst: int, tag: int = 0) -> Work:
        self._check_usable("send")
        st = devices.Staging()
        op, _ = self._p2p_op("send", tensor, dst, tag, st)  # a device array is staged (copied) right here
        work = self.ctx.runner.submit(None, f"send to {dst}", p2p=(self, op, "send"))  # type: ignore[arg-type]
        return work if not st.keep else _StagedWork(work, st)  # the host copy stays ours until the send is done

    def irecv(self, tensor: Any, src: int, tag: int = 0) -> Work:
        self._check_usable("recv")
        st = devices.Staging()
        op, _ = self._p2p_op("recv", tensor, src, tag, st, queued=True)
        work = self.ctx.runner.submit(None, f"recv from {src}", p2p=(self, op, "recv"))  # type: ignore[arg-type]
        return work if not st.keep else _StagedWork(work, st)

    def irecv_any(self, tensor: Any, tag: int = 0) -> Work:
        """Receive from whichever rank of the group sends this rank a point-to-point message with this tag
        first (one of another dtype or size is a CollectiveMismatchError): torch's recv without ``src``. The Work's result is the sender's group rank.
        It runs as one job in call order (the jobs behind it wait until a sender comes)."""
        self._check_usable("recv")
        if self.size < 2:
            raise ValueError(f"recv from any source in {self.name}: the group has no other rank")
        st = devices.Staging()
        a = st.flat(tensor, "tensor", writable=True, download=False)
        sigb = _p2p_sig(a.dtype, a.size, self.name)
        peers = [g for g in self.ranks if g != self.ctx.rank]
        ctx = self.ctx
        tag = int(tag)
        suffix = f" {self.name}"

        def fn() -> int:
            g = -1
            try:
                if ctx.broken is not None:
                    raise ctx.broken
                deadline = time.monotonic() + ctx.timeout
                # a point-to-point message of this group with this tag, whatever its size: one that does
                # not fit this receive is then a mismatch naming both, not a wait for another sender
                g = ctx.engine.wait_any(peers, lambda h: h.tag == tag and h.sig.startswith("p2p ")
                                        and h.sig.endswith(suffix), deadline)
                ctx.p2p_recv[g] += 1
                ctx.engine.run([Op("recv", g, a.view(np.uint8), ctx.p2p_recv[g], int(tag), sigb, None, False)],
                               deadline)
            except BaseException as e:
                if isinstance(e, InterlinkError):
                    raise
                seq = e.expected.seq if isinstance(e, HeaderMismatch) else (ctx.p2p_recv[g] if g >= 0 else 0)
                raise self._fail(e, "recv", seq) from None
            return self.ranks.index(g)

        work = ctx.runner.submit(st.wrap(fn) if st.keep else fn, f"recv from any rank of {self.name}")
        return work

    def send(self, tensor: Any, dst: int, tag: int = 0) -> None:
        if not self._p2p_now("send", tensor, dst, tag):
            self.isend(tensor, dst, tag).wait()

    def recv(self, tensor: Any, src: int, tag: int = 0) -> int:
        if not self._p2p_now("recv", tensor, src, tag):
            self.irecv(tensor, src, tag).wait()
        return src

    def _p2p_error(self, e: BaseException, op: Op, kind: str) -> InterlinkError:
        """The typed error of a failed point-to-point op: a mismatch names the message it is about (its
        per-pair sequence number), not the group's collective count."""
        if isinstance(e, InterlinkError):
            return e
        return self._fail(e, kind, e.expected.seq if isinstance(e, HeaderMismatch) else op.seq)

    def _p2p_now(self, kind: str, tensor: Any, peer: int, tag: int) -> bool:
        """A blocking send or receive of a numpy array run in the calling thread when nothing is queued
        before it: the same op, engine and errors as the runner's batch (run_p2p_batch), without handing
        the message to the runner thread and waiting to be woken (a round trip of 8 bytes on 2 ranks: 189
        -> 40 us, benchmarks/RESULTS.md). False (nothing done): the caller queues it (work is
        pending, another thread runs a call, a device array or a torch tensor, or on the runner itself)."""
        runner = self.ctx.runner
        if type(tensor) is not np.ndarray or runner._pending or runner.on_runner():
            return False
        if not runner._exec.acquire(blocking=False):
            return False
        try:
            if runner._pending:
                return False
            self._check_usable(kind)
            op, _ = self._p2p_op(kind, tensor, peer, tag)
            ctx = self.ctx
            try:
                if ctx.broken is not None:
                    raise ctx.broken
                ctx.engine.run([op], time.monotonic() + ctx.timeout)
            except BaseException as e:
                raise self._p2p_error(e, op, kind) from None
            return True
        finally:
            runner._exec.release()


# ---- helpers ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _p2p_sig(dtype: np.dtype, size: int, group: str) -> bytes:
    """A point-to-point message's signature (what the receiver checks), by shape (str of a dtype is slow)."""
    return encode_sig(f"p2p {dtype} n={size} {group}")


@functools.lru_cache(maxsize=1024)
def _check_op_dtype_cached(op: Any, dtype: np.dtype) -> ReduceOp:
    return check_op_dtype(op, dtype)


def run_p2p_batch(ctx: _Ctx, jobs: list) -> None:
    """Progress a batch of queued p2p jobs together (more may join while it waits)."""
    book = ctx.p2p_recv

    def numbered(op: Op) -> Op:
        if op.seq < 0:  # a queued receive: its number now, in the order the receives run
            book[op.peer] += 1
            op.seq = book[op.peer]
        return op

    ops = [numbered(j.p2p[1]) for j in jobs]

    def feed() -> list:
        more = ctx.runner.take_p2p()
        jobs.extend(more)
        return [numbered(j.p2p[1]) for j in more]

    try:
        if ctx.broken is not None:
            raise ctx.broken
        ctx.engine.run(ops, time.monotonic() + ctx.timeout, feed=feed)
    except BaseException as e:
        grp, op, kind = jobs[0].p2p
        err = grp._p2p_error(e, op, kind)
        for j in jobs:
            j.work._finish(exc=err)
        return
    for j in jobs:
        j.work._finish(None)


def _dtype_ok(dt: np.dtype) -> None:
    if dt.hasobject:
        raise TypeError(f"dtype {dt} cannot be communicated")


class _StagedWork(Work):
    """A receive into a device array: the data goes to the device when the wait completes."""

    def __init__(self, inner: Work, st: devices.Staging) -> None:
        super().__init__(inner.desc)
        self._inner = inner
        self._st: Optional[devices.Staging] = st

    def is_completed(self) -> bool:
        return self._inner.is_completed()

    def is_success(self) -> bool:
        return self._inner.is_success()

    def exception(self) -> Optional[BaseException]:
        return self._inner.exception()

    def wait(self, timeout: Optional[float] = None) -> bool:
        self._inner.wait(timeout)
        self._upload()
        return True

    def _upload(self) -> None:
        st, self._st = self._st, None
        if st is not None:
            st.upload()

    def add_done_callback(self, fn: Callable[[Work], Any]) -> None:
        def done(inner: Work) -> None:
            if inner.exception() is None:
                self._upload()
            fn(self)
        self._inner.add_done_callback(done)

    def result(self) -> Any:
        self.wait()
        return self._inner.result()


def _check_sizes(collective: str, isize: int, osize: int, p: int) -> None:
    """The tensor forms' size contract (host and device arrays alike): ValueError naming the call."""
    if collective == "all_gather" and osize != isize * p:
        raise ValueError(f"all_gather_into_tensor: output has {osize} elements, expected "
                         f"input size {isize} x group size {p} = {isize * p}")
    if collective == "reduce_scatter" and isize != osize * p:
        raise ValueError(f"reduce_scatter_tensor: input has {isize} elements, expected "
                         f"output size {osize} x group size {p} = {osize * p}")
    if collective == "all_to_all" and (isize % p or osize != isize):
        raise ValueError(f"all_to_all_single: input of {isize} elements must split evenly over "
                         f"{p} ranks and equal the output size {osize} (or pass split sizes)")


def _dev_alias(inp: Any, out: Any) -> Optional[int]:
    """alias_delta for device buffers: the input's element offset in the output's index space when
    they share memory (a misaligned overlap: a huge delta, which forces a copy of the input)."""
    if inp is out:
        return 0 if inp.size else None
    if not inp.overlaps(out):
        return None
    d = inp.ptr - out.ptr
    return 1 << 62 if d % inp.dtype.itemsize else d // inp.dtype.itemsize


def _same_dtype(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: output dtype {a.dtype} differs from input dtype {b.dtype}")


def _check_list(lst: Optional[list], p: int, like: np.ndarray, what: str, writable: bool = True,
                staging: Optional["devices.Staging"] = None) -> list[np.ndarray]:
    if lst is None or len(lst) != p:
        raise ValueError(f"{what} must hold {p} tensors (one per rank), got "
                         f"{'None' if lst is None else len(lst)}")
    out = []
    for i, t in enumerate(lst):
        if staging is None:
            a = arrays.as_flat(t, f"{what}[{i}]", writable=writable)
        else:  # outputs (writable) need no download: the call overwrites them
            a = staging.flat(t, f"{what}[{i}]", writable=writable, download=not writable)
        if a.dtype != like.dtype or a.size != like.size:
            raise ValueError(f"{what}[{i}] has {a.size} elements of {a.dtype}, expected {like.size} of {like.dtype}")
        out.append(a)
    return out


def _dim0(x: Any) -> int:
    shape = getattr(x, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    return arrays.as_flat(x, writable=False).size


def _splits(s: Optional[Sequence[int]], dim0: int, p: int, what: str) -> list[int]:
    if s is None:
        if dim0 % p:
            raise ValueError(f"{what} not given and dim 0 ({dim0}) does not split evenly over {p} ranks")
        return [dim0 // p] * p
    s = [int(v) for v in s]
    if len(s) != p or any(v < 0 for v in s) or sum(s) != dim0:
        raise ValueError(f"{what}={s} must be {p} non-negative sizes summing to dim 0 = {dim0}")
    return s
