"""Which launcher started this process, and what it says: rank, world size, local rank and size, and
where rank 0's store listens (:func:`detect_env`).

Launchers understood by :func:`detect_env` (first match wins; explicit arguments override)

    ============  ===========================  ==========================  ====================================
    source        rank / world size            local rank / local size     master address
    ============  ===========================  ==========================  ====================================
    ``env``       RANK, WORLD_SIZE             LOCAL_RANK,                 MASTER_ADDR, MASTER_PORT
                  (torchrun, ``interlink run``)  LOCAL_WORLD_SIZE
    ``openmpi``   OMPI_COMM_WORLD_RANK,        OMPI_COMM_WORLD_LOCAL_RANK, MASTER_ADDR, MASTER_PORT
                  OMPI_COMM_WORLD_SIZE         OMPI_COMM_WORLD_LOCAL_SIZE
    ``mpich``     PMI_RANK, PMI_SIZE           MPI_LOCALRANKID,            MASTER_ADDR, MASTER_PORT
                  (Hydra, Intel MPI)           MPI_LOCALNRANKS
    ``slurm``     SLURM_PROCID,                SLURM_LOCALID,              MASTER_ADDR, else the first host of
                  SLURM_STEP_NUM_TASKS or      SLURM_STEP_TASKS_PER_NODE   SLURM_STEP_NODELIST /
                  SLURM_NTASKS                 or SLURM_TASKS_PER_NODE     SLURM_JOB_NODELIST (where srun puts
                                               at SLURM_NODEID             task 0), else SLURM_LAUNCH_NODE_IPADDR
    ============  ===========================  ==========================  ====================================

    Defaults: ``MASTER_ADDR`` = ``127.0.0.1`` (only right for a single-host job; a warning is logged
    when the job is known to span hosts), ``MASTER_PORT`` = ``29500`` (torch.distributed's default).
    Unknown local rank / local size are ``None``: the runtime finds processes on the same host by
    exchanging a host identity, never from these variables.

"""

from __future__ import annotations

import logging
import os
import re
from typing import Mapping

__all__ = ["DEFAULT_MASTER_ADDR", "DEFAULT_MASTER_PORT", "detect_env"]

log = logging.getLogger("interlink.rendezvous")

DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def _first_host(nodelist: str) -> str | None:
    """The first host of a Slurm node list when it is simple: ``n[001-004],m7`` -> ``n001``."""
    s = nodelist.strip()
    depth = 0
    for i, c in enumerate(s):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            s = s[:i]
            break
    if not s:
        return None
    if "[" not in s:
        return s
    m = re.fullmatch(r"([^\[\],]*)\[([^\[\]]+)\]([^\[\],]*)", s)
    if not m:
        return None
    prefix, ranges, suffix = m.groups()
    first = ranges.split(",")[0].split("-")[0].strip()
    return prefix + first + suffix if first else None


def _slurm_task_counts(spec: str) -> list[int]:
    """A Slurm tasks-per-node list such as ``4(x2),2`` expanded per node: ``[4, 4, 2]``."""
    counts: list[int] = []
    if not spec.strip():
        return counts
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            return []
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def _slurm_local_size(env: Mapping[str, str]) -> int | None:
    node_id = _env_int(env, "SLURM_NODEID")
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        counts = _slurm_task_counts(env.get(name, ""))
        if not counts:
            continue
        if node_id is not None:
            return counts[node_id] if 0 <= node_id < len(counts) else None
        return counts[0] if len(set(counts)) == 1 else None
    return None


# (source, rank var, world vars (first present wins), local rank var, local size var)
_FLAVOURS: tuple[tuple[str, str, tuple[str, ...], str, str | None], ...] = (
    ("env", "RANK", ("WORLD_SIZE",), "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    (
        "openmpi",
        "OMPI_COMM_WORLD_RANK",
        ("OMPI_COMM_WORLD_SIZE",),
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("mpich", "PMI_RANK", ("PMI_SIZE",), "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("slurm", "SLURM_PROCID", ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"), "SLURM_LOCALID", None),
)


def detect_env(
    rank: int | None = None,
    world_size: int | None = None,
    local_rank: int | None = None,
    local_world_size: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict:
    """Who this process is in the job and where rank 0 listens.

    Returns ``{"rank", "world_size", "local_rank", "local_world_size", "master_addr",
    "master_port", "source"}``; ``source`` names the launcher whose variables were used
    (``env``, ``openmpi``, ``mpich``, ``slurm``) or ``explicit``. Explicit arguments override the
    environment field by field; see the module docstring for the variables and defaults. Raises
    ``ValueError`` when rank or world size cannot be found or are inconsistent.
    """
    env = os.environ if environ is None else environ
    found: tuple[str, int, int, int | None, int | None] | None = None
    partial: list[str] = []
    for source, rank_var, world_vars, lrank_var, lsize_var in _FLAVOURS:
        r = _env_int(env, rank_var)
        w = None
        for wv in world_vars:
            w = _env_int(env, wv)
            if w is not None:
                break
        if r is None and w is None:
            continue
        if r is None or w is None:
            partial.append(f"{rank_var if r is not None else '/'.join(world_vars)} is set but "
                           f"{'/'.join(world_vars) if r is not None else rank_var} is not")
            continue
        lr = _env_int(env, lrank_var)
        ls = _env_int(env, lsize_var) if lsize_var else _slurm_local_size(env)
        found = (source, r, w, lr, ls)
        break

    source = "explicit" if rank is not None and world_size is not None else (found[0] if found else "explicit")
    if found is not None:
        env_rank, env_world, env_lrank, env_lsize = found[1:]
    else:
        env_rank = env_world = env_lrank = env_lsize = None
    final_rank = rank if rank is not None else env_rank
    final_world = world_size if world_size is not None else env_world
    if final_rank is None or final_world is None:
        looked = (
            "RANK/WORLD_SIZE (torchrun, `interlink run`), OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE "
            "(Open MPI), PMI_RANK/PMI_SIZE (MPICH, Intel MPI), SLURM_PROCID/SLURM_NTASKS (srun)"
        )
        what = " and ".join(
            n for n, v in (("rank", final_rank), ("world_size", final_world)) if v is None
        )
        hint = f" ({'; '.join(partial)})" if partial else ""
        raise ValueError(
            f"cannot determine {what}: pass rank= and world_size=, or start the processes with a "
            f"launcher; looked for {looked}{hint}"
        )
    final_rank, final_world = int(final_rank), int(final_world)
    if final_world < 1:
        raise ValueError(f"world_size must be >= 1, got {final_world} (source: {source})")
    if not 0 <= final_rank < final_world:
        raise ValueError(f"rank must be in 0..{final_world - 1}, got {final_rank} (source: {source})")

    # local values from the environment only when they describe the same world
    same_world = found is not None and env_world == final_world
    lrank = local_rank if local_rank is not None else (env_lrank if same_world else None)
    lsize = local_world_size if local_world_size is not None else (env_lsize if same_world else None)
    if final_world == 1:
        lrank = 0 if lrank is None else lrank
        lsize = 1 if lsize is None else lsize
    if lsize is not None and lsize < 1:
        raise ValueError(f"local_world_size must be >= 1, got {lsize}")
    if lrank is not None and lsize is not None and not 0 <= lrank < lsize:
        raise ValueError(f"local_rank must be in 0..{lsize - 1}, got {lrank}")

    addr_source = "argument"
    addr = master_addr
    if addr is None and env.get("MASTER_ADDR"):
        addr, addr_source = env["MASTER_ADDR"], "MASTER_ADDR"
    if addr is None and found is not None and found[0] == "slurm":
        for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            host = _first_host(env.get(name, ""))
            if host:
                addr, addr_source = host, name
                break
        if addr is None and env.get("SLURM_LAUNCH_NODE_IPADDR"):
            addr, addr_source = env["SLURM_LAUNCH_NODE_IPADDR"], "SLURM_LAUNCH_NODE_IPADDR"
    if addr is None:
        addr, addr_source = DEFAULT_MASTER_ADDR, "default"
        if lsize is not None and lsize < final_world:
            log.warning(
                "MASTER_ADDR is not set and this job spans several hosts (%d ranks, %d on this host): "
                "the default %s only works on one host; export MASTER_ADDR=<host of rank 0>",
                final_world, lsize, DEFAULT_MASTER_ADDR,
            )
    if master_port is not None:
        port = int(master_port)
    else:
        env_port = _env_int(env, "INTERLINK_MASTER_PORT")
        if env_port is None:
            env_port = _env_int(env, "MASTER_PORT")
            # under torchrun its agent's own store already listens on MASTER_PORT: take the next port
            if env_port is not None and env.get("TORCHELASTIC_RUN_ID"):
                env_port += 1
        port = DEFAULT_MASTER_PORT if env_port is None else env_port
    if not 0 <= port <= 65535:
        raise ValueError(f"master_port must be in 0..65535, got {port}")
    log.debug("detect_env: rank %d of %d from %s, master %s:%d (%s)", final_rank, final_world, source, addr, port, addr_source)
    return {
        "rank": final_rank,
        "world_size": final_world,
        "local_rank": lrank,
        "local_world_size": lsize,
        "master_addr": addr,
        "master_port": port,
        "source": source,
    }
