"""Module-level API in torch.distributed's shape: init, the default group, new_group, destroy."""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import Any, Optional, Sequence

from ..errors import InterlinkError, PeerLostError
from ..transport.wire import secret_from_env
from .fastpath import FastPath
from .group import Group, _Ctx, run_p2p_batch
from .mesh import build_mesh
from .rendezvous import detect_env, rendezvous, store_barrier
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
    global _CTX, _WORLD
    if _CTX is not None:
        raise RuntimeError("interlink is already initialized; call interlink.destroy() first")
    _setup_logging()
    env = detect_env(rank=rank, world_size=world_size, master_addr=master_addr, master_port=master_port)
    r, w = int(env["rank"]), int(env["world_size"])
    if not 0 <= r < w:
        raise ValueError(f"rank {r} out of range for world_size {w}")
    itimeout = float(init_timeout if init_timeout is not None else min(timeout, 120.0))
    secret = secret_from_env()
    store, server = rendezvous(r, w, env["master_addr"], int(env["master_port"]), secret, itimeout)
    force_tcp = os.environ.get("INTERLINK_TRANSPORT", "").lower() == "tcp"
    try:
        engine = build_mesh(r, w, store, secret, env["master_addr"], int(env["master_port"]), itimeout, force_tcp)
        store_barrier(store, "init", r, w, itimeout)
    except BaseException:
        store.close()
        if server is not None:
            server.close()
        raise
    ctx = _Ctx(r, w, engine, store, server, float(timeout))
    if FastPath.usable(engine, w):
        ctx.fast = FastPath(engine, w)
    ctx.runner = Runner(lambda jobs: run_p2p_batch(ctx, jobs))
    _CTX = ctx
    _WORLD = Group(ctx, range(w), "world")
    atexit.register(_atexit)
    _hook_uncaught()
    return _WORLD


init_process_group = init


def _atexit() -> None:
    if _CTX is not None:
        try:
            destroy()
        except Exception:  # pragma: no cover
            pass


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


def destroy(group: Optional[Group] = None) -> None:
    """Leave the job: drain pending work, say goodbye to peers, close everything."""
    global _CTX, _WORLD
    if group is not None and group is not _WORLD:
        return  # subgroups share the world's connections
    ctx = _CTX
    if ctx is None:
        return
    _CTX = None
    _WORLD = None
    try:
        ctx.runner.drain()
        ctx.runner.stop()
        # no barrier: a rank that is done leaves (BYE); a peer still waiting for it in a call raises
        # PeerLostError ("left the job") at once, and a peer busy elsewhere (a checkpoint) is not held up
        ctx.engine.send_bye()
        # rank 0 hosts the store: it waits (briefly) until every rank is done with it
        if ctx.broken is None and ctx.world_size > 1:
            try:
                if ctx.rank != 0:
                    ctx.store.set(f"bye/{ctx.rank}", b"1")
                else:
                    ctx.store.wait([f"bye/{r}" for r in range(1, ctx.world_size)], timeout=5.0)
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


destroy_process_group = finalize = destroy


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


def all_reduce(tensor, op="sum", group=None, async_op=False, **kw):
    return _group(group).all_reduce(tensor, op, async_op, **kw)


def broadcast(tensor, src=0, group=None, async_op=False, **kw):
    return _group(group).broadcast(tensor, _local(group, src, 'src'), async_op, **kw)


def reduce(tensor, dst=0, op="sum", group=None, async_op=False, **kw):
    return _group(group).reduce(tensor, _local(group, dst, 'dst'), op, async_op, **kw)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False, **kw):
    return _group(group).all_gather_into_tensor(output_tensor, input_tensor, async_op, **kw)


def all_gather(tensor_list, tensor, group=None, async_op=False, **kw):
    return _group(group).all_gather(tensor_list, tensor, async_op, **kw)


def reduce_scatter_tensor(output, input, op="sum", group=None, async_op=False, **kw):
    return _group(group).reduce_scatter_tensor(output, input, op, async_op, **kw)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False, **kw):
    return _group(group).all_to_all_single(output, input, output_split_sizes, input_split_sizes, async_op, **kw)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False, **kw):
    return _group(group).gather(tensor, gather_list, _local(group, dst, 'dst'), async_op, **kw)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False, **kw):
    return _group(group).scatter(tensor, scatter_list, _local(group, src, 'src'), async_op, **kw)


def barrier(group=None, async_op=False, **kw):
    return _group(group).barrier(async_op, **kw)


def send(tensor, dst, group=None, tag=0):
    return _group(group).send(tensor, _local(group, dst, 'dst'), tag)


def recv(tensor, src, group=None, tag=0):
    return _group(group).ranks[_group(group).recv(tensor, _local(group, src, 'src'), tag)]


def isend(tensor, dst, group=None, tag=0):
    return _group(group).isend(tensor, _local(group, dst, 'dst'), tag)


def irecv(tensor, src, group=None, tag=0):
    return _group(group).irecv(tensor, _local(group, src, 'src'), tag)
