"""interlink: collective communication for GPU clusters in Python."""

__version__ = "0.1.0"

from .ops import ReduceOp  # noqa: E402

__all__ = ["ReduceOp", "__version__"]
