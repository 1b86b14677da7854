"""Backends that put interlink under other frameworks' APIs: torch.distributed (backends/torch.py)."""
