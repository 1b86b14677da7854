"""interlink: collective communication for GPU clusters in Python.

    import interlink as dist
    dist.init()                       # reads RANK/WORLD_SIZE/MASTER_ADDR/... like torch.distributed
    dist.all_reduce(x)                # in place, numpy arrays, torch CPU tensors, buffers
"""

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    CollectiveMismatchError,
    CommTimeoutError,
    InterlinkError,
    PeerLostError,
)
from .ops import ReduceOp  # noqa: E402

_API = (
    "init", "init_process_group", "destroy", "destroy_process_group", "finalize", "is_initialized",
    "get_rank", "get_world_size", "new_group", "NON_GROUP_MEMBER", "shrink",
    "all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor",
    "all_to_all_single", "gather", "scatter", "barrier", "send", "recv", "isend", "irecv",
    "all_to_all", "reduce_scatter", "all_gather_object", "gather_object", "broadcast_object_list",
    "scatter_object_list", "P2POp", "batch_isend_irecv", "monitored_barrier", "get_process_group_ranks",
    "get_global_rank", "get_group_rank",
)

__all__ = ["ReduceOp", "InterlinkError", "CommTimeoutError", "PeerLostError", "CollectiveMismatchError",
           "__version__", "empty", "zeros", *_API]


def __getattr__(name: str):
    # the runtime is imported on first use, so `import interlink` stays light (numpy only)
    if name in _API:
        from .runtime import api

        value = getattr(api, name)
        globals()[name] = value  # later lookups skip this hook
        return value
    if name == "Work":
        from .runtime.work import Work

        return Work
    if name in ("empty", "zeros"):  # arrays in shared memory, read in place by the ranks of this host
        from .transport import shmalloc

        value = getattr(shmalloc, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'interlink' has no attribute {name!r}")


def __dir__() -> list:
    # the API is loaded on first use; tab completion and dir() list it before that
    return sorted(set(globals()) | set(_API) | {"Work", "empty", "zeros"})
