"""benchmarks/compare.py: the medians over repeated runs, and a tiny real sweep."""

from __future__ import annotations

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "compare.py")


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("compare_script", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(system: str, t: float, size: int = 8) -> dict:
    return {"system": system, "collective": "all_reduce", "nranks": 2, "size": size, "time_us": t, "busbw": 1 / t}


def test_median_rows_takes_each_points_median_run(compare) -> None:
    runs = [[_row("mpich", 9.0), _row("interlink-shm", 1.0)],
            [_row("mpich", 2.0), _row("interlink-shm", 5.0)],
            [_row("mpich", 3.0), _row("interlink-shm", 4.0), _row("interlink-shm", 7.0, size=64)]]
    got = {(r["system"], r["size"]): r["time_us"] for r in compare.median_rows(runs)}
    assert got == {("mpich", 8): 3.0, ("interlink-shm", 8): 4.0, ("interlink-shm", 64): 7.0}
    two = compare.median_rows(runs[:2])  # an even count: the lower middle
    assert sorted(r["time_us"] for r in two) == [1.0, 2.0]


def test_repeated_sweep_keeps_every_run(compare) -> None:
    res = compare.run([2], ["all_reduce"], [8, 4096], ["interlink-shm"], runs=2)
    assert len(res["runs"]) == 2 and all(len(rows) == 2 for rows in res["runs"])
    assert sorted(r["size"] for r in res["rows"]) == [8, 4096]
    assert all(r["time_us"] > 0 for r in res["rows"])
    assert "| all_reduce | 2 | 4K |" in compare.table(res)
