"""Module-level API in torch.distributed's shape: init, the default group, new_group, destroy."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from typing import Any, Optional, Sequence

from numpy import ndarray as _ND

from ..errors import CommTimeoutError, InterlinkError, PeerLostError, RankConflictError
from ..launch.secret import job_secret
from ..launch.secret import secret_from_env
from .fastpath import FastPath
from .pageproto import A2A, AG, AR, BC, RS
from . import recorder
from .group import Group, _Ctx, run_p2p_batch
from .mesh import build_mesh
from ..launch.env import detect_env
from .rendezvous import rendezvous, store_barrier
from .work import Runner

log = logging.getLogger("interlink")

_CTX: Optional[_Ctx] = None
_WORLD: Optional[Group] = None


class _NonMember:
    """Returned by new_group on ranks outside the group (torch's GroupMember.NON_GROUP_MEMBER)."""

    def __repr__(self) -> str:
        return "NON_GROUP_MEMBER"


NON_GROUP_MEMBER = _NonMember()


def _setup_logging() -> None:
    level = os.environ.get("INTERLINK_DEBUG", "").upper()
    if level:
        logging.basicConfig(level=logging.DEBUG if level in ("TRACE", "DEBUG") else logging.INFO,
                            format="%(asctime)s interlink[%(process)d] %(levelname)s %(message)s")


def init(rank: Optional[int] = None, world_size: Optional[int] = None, timeout: float = 300.0,
         master_addr: Optional[str] = None, master_port: Optional[int] = None,
         init_timeout: Optional[float] = None) -> Group:
    """Join the job. Arguments default to the launcher's environment (RANK/WORLD_SIZE/MASTER_ADDR/
    MASTER_PORT from `interlink run` or torchrun; Open MPI, MPICH/PMI and Slurm variables too).

    ``timeout`` bounds every collective (CommTimeoutError after it); ``init_timeout`` bounds joining.
    """
    if _CTX is not None:
        raise RuntimeError("interlink is already initialized; call interlink.destroy() first")
    _setup_logging()
    env = detect_env(rank=rank, world_size=world_size, master_addr=master_addr, master_port=master_port)
    r, w = int(env["rank"]), int(env["world_size"])
    if not 0 <= r < w:
        raise ValueError(f"rank {r} out of range for world_size {w}")
    itimeout = float(init_timeout if init_timeout is not None else min(timeout, 120.0))
    from .policy import tcp_lanes

    tcp_lanes(1)  # a bad INTERLINK_TCP_LANES / INTERLINK_CHANNELS fails every rank here, before it joins
    secret = job_secret(env["master_addr"], int(env["master_port"]), w, rank=r) if w > 1 else None
    store, server = rendezvous(r, w, env["master_addr"], int(env["master_port"]), secret, itimeout,
                               on_conflict=_on_conflict)
    return _start(r, w, store, server, secret, env["master_addr"], int(env["master_port"]), timeout, itimeout)


def init_from_store(store: Any, rank: int, world_size: int, timeout: float = 300.0,
                    master_addr: Optional[str] = None, master_port: Optional[int] = None) -> Group:
    """Join the job through a store someone else runs (the torch.distributed backend: torch's own store;
    no second port). ``store`` offers set/get/wait/missing/add as :class:`~.store.StoreClient` does.
    The mesh's job secret: ``INTERLINK_SECRET`` when it is set (then nothing secret goes into the store);
    else a random one that rank 0 puts in the store, which is then as safe as the store (torch's TCPStore has
    no authentication: whoever reaches it can read it, as it can join gloo's job; docs/security.md)."""
    if _CTX is not None:
        raise RuntimeError("interlink is already initialized; call interlink.destroy() first")
    _setup_logging()
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} out of range for world_size {world_size}")
    itimeout = float(min(timeout, 120.0))
    secret = secret_from_env()
    if secret is None:
        if rank == 0:
            import secrets as _secrets

            store.set("interlink/secret", _secrets.token_bytes(32))
        secret = bytes(store.get("interlink/secret", timeout=itimeout))
    addr = master_addr or os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(master_port or os.environ.get("MASTER_PORT", "29500"))
    return _start(rank, world_size, store, None, secret, addr, port, timeout, itimeout)


def _start(r: int, w: int, store: Any, server: Any, secret: bytes, master_addr: str, master_port: int,
           timeout: float, itimeout: float) -> Group:
    global _CTX, _WORLD
    try:
        engine = build_mesh(r, w, store, secret, master_addr, int(master_port), itimeout)
        store_barrier(store, "init", r, w, itimeout)
    except BaseException:
        store.close()
        if server is not None:  # after a rank conflict, the other ranks still read why from the store
            if server.conflict is not None:
                server.await_claims(w, 5.0)  # ranks still starting come to hear it, for a few seconds
            # linger until every rank has let go of the store (each does as soon as its init fails): a rank
            # that lost a peer to the conflict asks the store why; 10 s bounds it on a loaded machine
            server.close(linger=CONFLICT_LINGER_S if server.conflict is not None else 0.0)
        raise
    ctx = _Ctx(r, w, engine, store, server, float(timeout))
    ctx.mesh_args = (secret, master_addr, int(master_port))  # shrink connects the survivors with these
    if FastPath.usable(engine, w):
        ctx.fast = FastPath(engine, w)
    ctx.runner = Runner(lambda jobs: run_p2p_batch(ctx, jobs))
    _CTX = ctx
    _WORLD = Group(ctx, range(w), "world")
    atexit.register(_atexit)
    recorder.install()  # INTERLINK_DUMP_DIR: dumps at exit, on SIGUSR1 and SIGTERM (after the line above: runs first)
    _hook_uncaught()
    if server is not None and server.conflict is not None:
        # a second claimant reached the store after the last store request of init but before _CTX was set:
        # the store's on_conflict found no job to stop then, and no rank asks the store anything any more
        _on_conflict(server.conflict)
    return _WORLD


init_process_group = init


def _atexit() -> None:
    if _CTX is not None:
        try:
            destroy()
        except Exception:  # pragma: no cover
            pass


_CONFLICT_LOCK = threading.Lock()
CONFLICT_LINGER_S = 10.0  # how long rank 0 keeps its store for the other ranks after a rank conflict in init
_UNCAUGHT: Optional[str] = None  # why this process is going down, if an exception escaped the script


def _hook_uncaught() -> None:
    """An exception that escapes the script aborts the job at once: the exiting rank tells every peer why
    (they raise within a second, naming it) instead of leaving them in a collective until the timeout."""
    if getattr(sys.excepthook, "_interlink", False):
        return
    prev = sys.excepthook

    def hook(tp, value, tb):  # type: ignore[no-untyped-def]
        global _UNCAUGHT
        if _CTX is not None and not issubclass(tp, KeyboardInterrupt):
            _UNCAUGHT = f"{tp.__name__}: {value}"
            try:
                _abort(f"rank {_CTX.rank} exited with an uncaught {_UNCAUGHT}")
            except Exception:  # pragma: no cover - best effort
                pass
        prev(tp, value, tb)

    hook._interlink = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _abort(message: str) -> None:
    """Mark the communicator failed and tell every peer (an ABORT frame on the control plane)."""
    ctx = _CTX
    if ctx is None or ctx.broken is not None:
        return
    err = PeerLostError(message, op="exit", group="world", seq=0, ranks=[ctx.rank])
    ctx.broken = err
    ctx.engine.send_abort({"error": "PeerLostError", "message": message, "ranks": [ctx.rank]})


def _on_conflict(message: str) -> None:
    """Rank 0's store saw a second process claim a taken rank: stop the job on every rank (the store refuses
    every request from now on, which fails the ranks still joining; the running ones get this abort)."""
    with _CONFLICT_LOCK:  # the store's thread and _start may both get here: one abort
        ctx = _CTX
        if ctx is None or ctx.broken is not None or ctx.conflict_sent:
            return
        ctx.conflict_sent = True
    import re

    m = re.match(r"rank (\d+) ", message)
    ranks = [int(m.group(1))] if m else []
    # the ABORT goes out before this rank's own calls see the error: else its main thread could raise, leave
    # and say BYE first, and a peer would read 'rank 0 left the job' instead of the conflict
    ctx.engine.send_abort({"error": "RankConflictError", "message": message, "ranks": ranks})
    ctx.broken = RankConflictError(message, op="init", group="world", seq=0, ranks=ranks)


def is_initialized() -> bool:
    return _CTX is not None


def _world() -> Group:
    if _WORLD is None:
        raise RuntimeError("interlink is not initialized: call interlink.init() first "
                           "(or start the script with `interlink run -n N script.py`)")
    return _WORLD


def get_rank(group: Optional[Group] = None) -> int:
    return (group or _world()).rank


def get_world_size(group: Optional[Group] = None) -> int:
    return (group or _world()).size


def new_group(ranks: Optional[Sequence[int]] = None) -> Any:
    """Every rank must call new_group with the same ranks, in the same order (like torch)."""
    world = _world()
    ctx = world.ctx
    ranks = list(range(ctx.world_size)) if ranks is None else [int(x) for x in ranks]
    if len(set(ranks)) != len(ranks) or any(not 0 <= x < ctx.world_size for x in ranks) or not ranks:
        raise ValueError(f"new_group: ranks {ranks} must be distinct ranks in [0, {ctx.world_size})")
    ctx.groups += 1
    g = Group(ctx, ranks, f"g{ctx.groups}")
    return g if ctx.rank in ranks else NON_GROUP_MEMBER


def shrink(exclude: Optional[Sequence[int]] = None, group: Optional[Group] = None,
           timeout: Optional[float] = None) -> Group:
    """The survivors of ``group`` (default: the world) as a new group: ``exclude`` lists the group ranks
    to leave out (global ranks for the world), None after a PeerLostError (the survivors agree on who is
    lost). Shrinking the world makes the new group the world of the module-level calls (ranks renumbered
    0 .. n-1). See Group.shrink and docs/faults.md."""
    return _group(group).shrink(exclude, timeout)


def destroy(group: Optional[Group] = None) -> None:
    """Leave the job: drain pending work, say goodbye to peers, close everything."""
    global _CTX, _WORLD
    if group is not None and group is not _WORLD:
        return  # subgroups share the world's connections
    ctx, world = _CTX, _WORLD
    if ctx is None:
        return
    _CTX = None
    _WORLD = None
    late: Optional[InterlinkError] = None
    try:
        ctx.runner.drain()
        ctx.runner.stop()
        if ctx.fast is not None and ctx.broken is None:
            # the last broadcasts whose root returned without waiting for its receivers: their headers checked
            # now (a mismatch raises here, after everything is closed)
            try:
                ctx.fast.settle_at_exit()
            except Exception as e:
                late = world._fail(e, "broadcast", world.seq) if world is not None else None
        elif ctx.fast is not None and ctx.fast.pend:
            # ... in a job that failed meanwhile (a receiver raised in one of them): the failure, here
            late = ctx.broken
        # no barrier: a rank that is done leaves (BYE); a peer still waiting for it in a call raises
        # PeerLostError ("left the job") at once, and a peer busy elsewhere (a checkpoint) is not held up
        ctx.engine.send_bye()
        # and ends its data connections: a peer still taking this rank's last bytes reads them, then EOF
        ctx.engine.end_data()
        # rank 0 hosts the store: it waits (briefly) until every rank is done with it
        if ctx.broken is None and ctx.world_size > 1:
            try:
                if ctx.rank != 0:
                    ctx.store.set(f"bye/{ctx.rank}", b"1")
                else:
                    _await_byes(ctx, 5.0)
            except InterlinkError as e:
                log.debug("interlink: store goodbye: %s", e)
    finally:
        ctx.engine.close()
        try:
            ctx.store.close()
        except Exception:
            pass
        if ctx.server is not None:
            ctx.server.close(linger=0.2)
    if late is not None:
        raise late


destroy_process_group = finalize = destroy


def _await_byes(ctx: _Ctx, timeout: float) -> None:
    """Rank 0 (host of the store) waits until every other rank is done with the store (its ``bye`` key), but
    not for a rank whose process is gone (its control connection closed, or it aborted): a rank 0 that ends
    normally while peers fail leaves at once instead of after ``timeout``."""
    eng = ctx.engine
    deadline = time.monotonic() + timeout
    while True:
        try:
            eng.poll_controls(0.0)
        except Exception:  # noqa: BLE001 - an abort or EOF only marks that peer dead
            pass
        need = [f"bye/{r}" for r in range(1, ctx.world_size) if r not in eng.dead]
        left = deadline - time.monotonic()
        if not need or left <= 0:
            return
        try:
            ctx.store.wait(need, min(left, 0.05))
            return
        except CommTimeoutError:
            continue


def _group(group: Optional[Group]) -> Group:
    if group is None:
        return _world()
    if group is NON_GROUP_MEMBER:
        raise ValueError("this rank is not a member of the group")
    return group


def _local(group: Optional[Group], r: int, what: str) -> int:
    """torch semantics: src/dst of module-level calls are global ranks, even with a group."""
    g = _group(group)
    if g is _WORLD:
        return r
    try:
        return g.ranks.index(int(r))
    except ValueError:
        raise ValueError(f"{what}={r} (a global rank) is not a member of {g.name} {list(g.ranks)}") from None


# The module-level calls on the world group (no group=, no other keyword, synchronous, a numpy array) run
# the Python path of Group._hot themselves (Group._hot_py) and else go on where Group's method would (its
# _name): two Python frames less than calling the method. Where the compiled core runs these five are
# C callables (the end of this module, _entries): their common call goes to the core's Bind.call, and to
# the Python function below where the core does not take the call's shape.
def all_reduce(tensor, op="sum", group=None, async_op=False, **kw):
    w = _WORLD
    if group is None and not kw and w is not None:  # the common call, without the layers (latency)
        if not async_op and type(tensor) is _ND and w._fk[AR] is not None:
            if w._hot_py(AR, tensor, None, op, 0):
                return None
        return w._all_reduce(tensor, op, async_op, None, None)
    return _group(group).all_reduce(tensor, op, async_op, **kw)


def broadcast(tensor, src=0, group=None, async_op=False, **kw):
    w = _WORLD
    if group is None and not kw and w is not None:
        if not async_op and type(tensor) is _ND and w._fk[BC] is not None:
            if w._hot_py(BC, tensor, None, None, src):
                return None
        return w._broadcast(tensor, src, async_op, None, None)
    return _group(group).broadcast(tensor, _local(group, src, 'src'), async_op, **kw)


def reduce(tensor, dst=0, op="sum", group=None, async_op=False, **kw):
    return _group(group).reduce(tensor, _local(group, dst, 'dst'), op, async_op, **kw)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False, **kw):
    w = _WORLD
    if group is None and not kw and w is not None:
        if not async_op and type(input_tensor) is _ND and w._fk[AG] is not None:
            if w._hot_py(AG, input_tensor, output_tensor, None, 0):
                return None
        return w._all_gather_into_tensor(output_tensor, input_tensor, async_op, None, None)
    return _group(group).all_gather_into_tensor(output_tensor, input_tensor, async_op, **kw)


def all_gather(tensor_list, tensor, group=None, async_op=False, **kw):
    return _group(group).all_gather(tensor_list, tensor, async_op, **kw)


def reduce_scatter_tensor(output, input, op="sum", group=None, async_op=False, **kw):
    w = _WORLD
    if group is None and not kw and w is not None:
        if not async_op and type(input) is _ND and w._fk[RS] is not None:
            if w._hot_py(RS, input, output, op, 0):
                return None
        return w._reduce_scatter_tensor(output, input, op, async_op, None, None)
    return _group(group).reduce_scatter_tensor(output, input, op, async_op, **kw)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False, **kw):
    w = _WORLD
    if group is None and not kw and w is not None:  # the common call, without the layers (latency)
        if not async_op and type(input) is _ND and output_split_sizes is None and input_split_sizes is None \
                and w._fk[A2A] is not None:
            if w._hot_py(A2A, input, output, None, 0):
                return None
        return w._all_to_all_single(output, input, output_split_sizes, input_split_sizes, async_op, None, None)
    return _group(group).all_to_all_single(output, input, output_split_sizes, input_split_sizes, async_op, **kw)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False, **kw):
    return _group(group).gather(tensor, gather_list, _local(group, dst, 'dst'), async_op, **kw)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False, **kw):
    return _group(group).scatter(tensor, scatter_list, _local(group, src, 'src'), async_op, **kw)


def barrier(group=None, async_op=False, **kw):
    if group is None and not kw and _WORLD is not None:
        return _WORLD.barrier(async_op)
    return _group(group).barrier(async_op, **kw)


def send(tensor, dst, group=None, tag=0):
    return _group(group).send(tensor, _local(group, dst, 'dst'), tag)


def recv(tensor, src=None, group=None, tag=0):
    """Receive into ``tensor``; returns the sender's global rank. ``src=None``: from whichever rank of the
    group sends a matching message (dtype, size, tag) first, as torch's recv without src."""
    g = _group(group)
    if src is None:
        return g.ranks[g.irecv_any(tensor, tag).result()]
    return g.ranks[g.recv(tensor, _local(group, src, 'src'), tag)]


def isend(tensor, dst, group=None, tag=0):
    return _group(group).isend(tensor, _local(group, dst, 'dst'), tag)


def irecv(tensor, src=None, group=None, tag=0):
    """A receive in flight; ``src=None``: from any rank (the Work's result() is the sender's group rank)."""
    if src is None:
        return _group(group).irecv_any(tensor, tag)
    return _group(group).irecv(tensor, _local(group, src, 'src'), tag)


# ---- what torch.distributed users also call ----------------------------------------------------------


def get_process_group_ranks(group: Optional[Group] = None) -> list:
    """The global ranks of a group, in group-rank order (torch.distributed.get_process_group_ranks)."""
    return list(_group(group).ranks)


def get_global_rank(group: Optional[Group], group_rank: int) -> int:
    """The global rank of ``group_rank`` in ``group``."""
    g = _group(group)
    if not 0 <= int(group_rank) < g.size:
        raise ValueError(f"group_rank={group_rank} is out of range for {g.name} of size {g.size}")
    return g.ranks[int(group_rank)]


def get_group_rank(group: Optional[Group], global_rank: int) -> int:
    """The rank in ``group`` of global rank ``global_rank``."""
    return _local(group, global_rank, "global_rank")


def _pickled(obj: Any) -> Any:
    import pickle

    import numpy as np

    return np.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=np.uint8)


def _unpickled(buf: Any) -> Any:
    import pickle

    return pickle.loads(buf.tobytes())


def all_gather_object(object_list: list, obj: Any, group: Optional[Group] = None) -> None:
    """object_list[i] = rank i's ``obj`` (any picklable object; sizes may differ). Like torch, this
    unpickles what the peers send: only use it between ranks you trust."""
    import numpy as np

    g = _group(group)
    if not isinstance(object_list, list) or len(object_list) != g.size:
        raise ValueError(f"all_gather_object: object_list must be a list of {g.size} entries (the group size)")
    data = _pickled(obj)
    sizes = np.zeros(g.size, dtype=np.int64)
    g.all_gather_into_tensor(sizes, np.array([data.size], dtype=np.int64))
    m = int(sizes.max()) if g.size else 0
    mine = np.zeros(m, dtype=np.uint8)
    mine[:data.size] = data
    out = np.empty(m * g.size, dtype=np.uint8)
    g.all_gather_into_tensor(out, mine)
    for i in range(g.size):
        object_list[i] = _unpickled(out[i * m:i * m + int(sizes[i])])


def gather_object(obj: Any, object_gather_list: Optional[list] = None, dst: int = 0,
                  group: Optional[Group] = None) -> None:
    """On ``dst`` (a global rank), object_gather_list[i] = rank i's ``obj``; None elsewhere."""
    g = _group(group)
    root = _local(group, dst, "dst")
    if g.rank == root and (not isinstance(object_gather_list, list) or len(object_gather_list) != g.size):
        raise ValueError(f"gather_object: object_gather_list must be a list of {g.size} entries on rank {dst}")
    got: list = [None] * g.size
    all_gather_object(got, obj, group)  # sizes differ per rank: gathered everywhere, kept at the root
    if g.rank == root:
        object_gather_list[:] = got  # type: ignore[index]


def broadcast_object_list(object_list: list, src: int = 0, group: Optional[Group] = None,
                          device: Any = None) -> None:
    """Every rank's ``object_list`` becomes ``src``'s (same length on every rank, as torch requires)."""
    import numpy as np

    g = _group(group)
    root = _local(group, src, "src")
    if not isinstance(object_list, list):
        raise TypeError("broadcast_object_list: object_list must be a list")
    data = _pickled(list(object_list)) if g.rank == root else np.empty(0, np.uint8)
    size = np.array([data.size], dtype=np.int64)
    g.broadcast(size, root)
    buf = data if g.rank == root else np.empty(int(size[0]), dtype=np.uint8)
    g.broadcast(buf, root)
    got = _unpickled(buf)
    if len(got) != len(object_list):
        raise ValueError(f"broadcast_object_list: rank {src} sent {len(got)} objects, this rank's list has "
                         f"{len(object_list)} entries (every rank passes a list of the same length)")
    object_list[:] = got


def scatter_object_list(scatter_object_output_list: list, scatter_object_input_list: Optional[list] = None,
                        src: int = 0, group: Optional[Group] = None) -> None:
    """scatter_object_output_list[0] = ``src``'s scatter_object_input_list[this rank]."""
    g = _group(group)
    root = _local(group, src, "src")
    if not isinstance(scatter_object_output_list, list) or len(scatter_object_output_list) < 1:
        raise ValueError("scatter_object_list: scatter_object_output_list must be a list of at least one entry")
    if g.rank == root and (not isinstance(scatter_object_input_list, list)
                           or len(scatter_object_input_list) != g.size):
        raise ValueError(f"scatter_object_list: the input list on rank {src} must have {g.size} entries")
    objs = [list(scatter_object_input_list) if g.rank == root else None]  # type: ignore[arg-type]
    broadcast_object_list(objs, src, group)
    scatter_object_output_list[0] = objs[0][g.rank]


def _cat(tensors: Sequence[Any]) -> Any:
    """One flat array of the tensors' elements, of their kind (numpy, torch CPU/CUDA, CuPy)."""
    import numpy as np

    mod = type(tensors[0]).__module__
    if mod.startswith("torch"):
        import torch

        return torch.cat([t.reshape(-1) for t in tensors])
    if mod.startswith("cupy"):
        import cupy

        return cupy.concatenate([t.reshape(-1) for t in tensors])
    from ..arrays import as_flat

    return np.concatenate([as_flat(t, "tensor", writable=False) for t in tensors])


def _numel(t: Any) -> int:
    n = getattr(t, "numel", None)
    return int(n()) if callable(n) else int(getattr(t, "size"))


def _put(dst: Any, flat: Any) -> None:
    """dst[...] = flat (same number of elements), for numpy / torch / CuPy."""
    mod = type(dst).__module__
    if mod.startswith("torch"):
        dst.copy_(flat.reshape(dst.shape))
    else:
        dst[...] = flat.reshape(dst.shape)


def all_to_all(output_tensor_list: list, input_tensor_list: list, group: Optional[Group] = None,
               async_op: bool = False) -> Any:
    """torch's list form: output_tensor_list[i] receives input_tensor_list[this rank] of rank i (sizes may
    differ per pair). Runs as all_to_all_single over one concatenated buffer."""
    g = _group(group)
    if len(output_tensor_list) != g.size or len(input_tensor_list) != g.size:
        raise ValueError(f"all_to_all: both lists must have {g.size} tensors (the group size)")
    inp = _cat(input_tensor_list)
    outs = list(output_tensor_list)
    osz = [_numel(t) for t in outs]
    out = _cat(outs)  # a buffer of the outputs' kind and total size (its contents are overwritten)
    w = g.all_to_all_single(out, inp, osz, [_numel(t) for t in input_tensor_list], async_op=async_op)

    def finish() -> None:
        off = 0
        for t, n in zip(outs, osz):
            _put(t, out[off:off + n])
            off += n

    if w is None:
        finish()
        return None
    return _Then(w, finish)


def reduce_scatter(output: Any, input_list: list, op: Any = "sum", group: Optional[Group] = None,
                   async_op: bool = False) -> Any:
    """torch's list form: output = the reduction over ranks of input_list[this rank]."""
    g = _group(group)
    if len(input_list) != g.size:
        raise ValueError(f"reduce_scatter: input_list must have {g.size} tensors (the group size)")
    n = _numel(output)
    if any(_numel(t) != n for t in input_list):
        raise ValueError(f"reduce_scatter: every tensor of input_list must have the output's {n} elements")
    return g.reduce_scatter_tensor(output, _cat(input_list), op, async_op)


class P2POp:
    """One point-to-point operation for batch_isend_irecv: ``op`` is isend/irecv (the functions, or the
    strings "isend"/"irecv"), ``peer`` a global rank."""

    def __init__(self, op: Any, tensor: Any, peer: int, group: Optional[Group] = None, tag: int = 0,
                 group_peer: Optional[int] = None) -> None:
        name = op if isinstance(op, str) else getattr(op, "__name__", "")
        if name not in ("isend", "irecv"):
            raise ValueError(f"P2POp: op must be isend or irecv, got {op!r}")
        self.op = name
        self.tensor = tensor
        self.group = group
        self.tag = int(tag)
        self.peer = get_global_rank(group, group_peer) if group_peer is not None else int(peer)


def batch_isend_irecv(p2p_op_list: list) -> list:
    """Post every send and receive of the list at once (they progress together, in any order across
    peers); returns one Work per op, as torch does."""
    if not p2p_op_list or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise ValueError("batch_isend_irecv: expects a non-empty list of P2POp")
    return [isend(p.tensor, p.peer, p.group, p.tag) if p.op == "isend" else irecv(p.tensor, p.peer, p.group, p.tag)
            for p in p2p_op_list]


def monitored_barrier(group: Optional[Group] = None, timeout: Any = None, wait_all_ranks: bool = False) -> None:
    """A barrier whose timeout names the ranks that did not arrive (CommTimeoutError.ranks), as torch's
    monitored_barrier; ``timeout`` in seconds or a datetime.timedelta (default: the job's timeout)."""
    t = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    _group(group).barrier(timeout=None if t is None else float(t))


class _Then:
    """A Work that runs ``finish`` once the inner one completes (list forms' copy-out)."""

    def __init__(self, inner: Any, finish: Any) -> None:
        self._inner, self._finish = inner, finish

    def wait(self, timeout: Optional[float] = None) -> bool:
        self._inner.wait(timeout)
        if self._finish is not None:
            f, self._finish = self._finish, None
            f()
        return True

    def is_completed(self) -> bool:
        return self._inner.is_completed()

    def exception(self) -> Any:
        return self._inner.exception()


# ---- the module-level latency calls as one C callable each (runtime/_hotcore.c, Entry) -------------------
# A call whose shape the core does not take (or any call but the common one) runs the Python function
# above, with the arguments as given.

#: name -> (kind, the input's parameter, the output's, the op's, the root's, parameters that must be None)
_ENTRIES = {
    "all_reduce": (AR, "tensor", None, "op", None, ()),
    "broadcast": (BC, "tensor", None, None, "src", ()),
    "all_gather_into_tensor": (AG, "input_tensor", "output_tensor", None, None, ()),
    "reduce_scatter_tensor": (RS, "input", "output", "op", None, ()),
    "all_to_all_single": (A2A, "input", "output", None, None, ("output_split_sizes", "input_split_sizes")),
}


def _entries() -> None:
    """Replace the five module-level latency calls by Entry objects of the compiled core, where it runs
    (ccore.enabled(): built, and INTERLINK_NO_CCORE unset). Each keeps its Python function's name, doc and
    signature (functools.update_wrapper: __wrapped__)."""
    import functools
    import inspect

    from . import ccore

    if not ccore.enabled() or not hasattr(ccore._hotcore, "Entry"):
        return
    g = globals()
    for name, (kind, a, out, op, root, nones) in _ENTRIES.items():
        fn = g[name]
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        names = tuple(p.name for p in params)
        nreq = sum(p.default is p.empty for p in params)
        defaults = tuple(None if p.default is p.empty else p.default for p in params)
        e = ccore._hotcore.Entry(kind, fn, g, _ND, names, defaults, nreq, a, out, op, root, "group", "async_op",
                                 nones)
        g[name] = functools.update_wrapper(e, fn)


_entries()
