"""The nccl-tests table of ``interlink bench`` and its JSON form.

Rows are the dicts of :func:`interlink.bench.sweep.run_size` (times in microseconds, bandwidths in
bytes/s); the table prints GB/s = 1e9 bytes/s, like nccl-tests:

    #                                                              out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong  algorithm
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
               8             2   float32     sum      -1   412.31    0.00    0.00      0   398.02    0.00    0.00      0  recursive_doubling

Extra columns: every entry of :data:`EXTRA_COLUMNS` whose key any row carries is printed between the
in-place #wrong and the algorithm column. ``pred_busbw`` (a model's predicted bus bandwidth, bytes/s
like ``oop_busbw``) is the one defined so far; add a row key and it shows up. Values that are None
print as N/A.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence, TextIO

GB = 1e9


@dataclass(frozen=True)
class Column:
    key: str
    title: tuple[str, str, str]  # the three header lines (group, name, unit)
    width: int
    fmt: Callable[[Any], str]


def _gbs(v: Any) -> str:
    return "N/A" if v is None else f"{v / GB:.2f}"


def _time(us: Any) -> str:
    """nccl-tests-like: two decimals while it fits in 7 characters, fewer after."""
    if us is None:
        return "N/A"
    if us < 1e4:
        return f"{us:.2f}"
    if us < 1e5:
        return f"{us:.1f}"
    return f"{us:.0f}"


def _wrong(v: Any) -> str:
    return "N/A" if v is None else str(int(v))


# optional columns, printed when any row carries the key (in this order)
EXTRA_COLUMNS: list[Column] = [
    Column("pred_busbw", ("model", "pred", "(GB/s)"), 7, _gbs),
]


def extra_columns(rows: Iterable[dict]) -> list[Column]:
    rows = list(rows)
    return [c for c in EXTRA_COLUMNS if any(c.key in r for r in rows)]


def _mode_cells(row: dict, mode: str) -> str:
    return (f"  {_time(row.get(f'{mode}_time_us')):>7}  {_gbs(row.get(f'{mode}_algbw')):>6}"
            f"  {_gbs(row.get(f'{mode}_busbw')):>6} {_wrong(row.get(f'{mode}_wrong')):>6}")


def format_row(row: dict, extras: Sequence[Column] = ()) -> str:
    """One row; a barrier's (type "-") has no bandwidth: its GB/s cells are "-". A prediction made with the
    model's default host parameters (``pred_uncalibrated``) is marked "*" (the note under the table)."""
    cells = _mode_cells(row, "oop") + _mode_cells(row, "ip")
    if row.get("type") == "-":
        cells = "".join(f"  {_time(row.get(f'{m}_time_us')):>7}  {'-':>6}  {'-':>6} {_wrong(row.get(f'{m}_wrong')):>6}"
                        for m in ("oop", "ip"))
    line = (f"{row['size']:>12}  {row['count']:>12}  {row['type']:>8}  {row['redop']:>6}  {row['root']:>6}" + cells)
    for c in extras:
        cell = "-" if row.get("type") == "-" else c.fmt(row.get(c.key))
        if c.key == "pred_busbw" and row.get("pred_uncalibrated") and row.get(c.key) is not None:
            cell += "*"
        line += f"  {cell:>{c.width}}"
    return line + f"  {row.get('algorithm', '')}"


def column_header(extras: Sequence[Column] = ()) -> list[str]:
    # the five leading columns take 52 characters, each mode group 32: center the group titles
    l1 = ("#".ljust(62) + "out-of-place").ljust(96) + "in-place"
    l1 = l1.ljust(52 + 2 * 32)
    l2 = (f"#{'size':>11}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
          + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}" * 2)
    l3 = (f"#{'(B)':>11}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
          + f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6} {'':>6}" * 2)
    for c in extras:
        l1 += f"  {c.title[0]:>{c.width}}"
        l2 += f"  {c.title[1]:>{c.width}}"
        l3 += f"  {c.title[2]:>{c.width}}"
    l2 += "  algorithm"
    return [l1.rstrip(), l2, l3.rstrip()]


def header(meta: dict) -> list[str]:
    """The '#' lines above the columns. meta: collective, nranks, transport, dtype, op, root,
    algorithm (None = default choice per size), min_bytes, max_bytes, factor, iters, warmup, check,
    version, ranks (list of {rank, pid, host})."""
    coll = meta.get("collective", "?")
    algo = meta.get("algorithm") or "default (per size)"
    rooted = coll in ("broadcast", "reduce", "gather", "scatter")
    reducing = coll in ("all_reduce", "reduce", "reduce_scatter")
    iters = meta.get("iters")
    warm = meta.get("warmup")
    lines = [
        f"# interlink bench {meta.get('version', '')}: nccl-tests format, GB/s = 1e9 bytes/s, "
        f"time = per op, max over ranks",
        f"#  Collective {coll}, nranks {meta.get('nranks')}, transport {meta.get('transport')}, "
        f"dtype {meta.get('dtype')}, op {meta.get('op') if reducing else 'none'}, "
        f"root {meta.get('root') if rooted else -1}, algorithm {algo}",
        f"#  minBytes {meta.get('min_bytes')} maxBytes {meta.get('max_bytes')} step: {meta.get('factor')}(factor) "
        f"warmup iters: {warm if warm is not None else 'auto'} "
        f"iters: {iters if iters is not None else 'auto'} validation: {1 if meta.get('check', True) else 0}",
    ]
    if iters is None or warm is None:
        lines.append(f"#  auto iterations: iters = clamp({meta.get('auto_bytes', 256 * 2**20)} // size, 1, 20), "
                     f"warmup = clamp(iters // 4, 1, 5)")
    lines.append("#")
    ranks = meta.get("ranks") or []
    if ranks:
        lines.append("# Using devices")
        for r in ranks:
            lines.append(f"#  Rank {r.get('rank', 0):>2} Pid {r.get('pid', 0):>7} on {r.get('host', 'localhost'):>10} "
                         f"device cpu")
        lines.append("#")
    return lines


def avg_busbw(rows: Iterable[dict]) -> float:
    """nccl-tests' closing figure: the mean busbw over every out-of-place and in-place result (bytes/s)."""
    vals = [r[k] for r in rows for k in ("oop_busbw", "ip_busbw") if r.get(k) is not None]
    return sum(vals) / len(vals) if vals else 0.0


def total_wrong(rows: Iterable[dict]) -> int:
    return sum(int(r[k]) for r in rows for k in ("oop_wrong", "ip_wrong") if r.get(k) is not None)


def footer(rows: Sequence[dict], check: bool = True) -> list[str]:
    wrong = total_wrong(rows)
    lines = []
    if check and any(r.get(k) is not None for r in rows for k in ("oop_wrong", "ip_wrong")):
        lines.append(f"# {'Wrong values':<20} : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    else:
        lines.append(f"# {'Wrong values':<20} : N/A" + ("" if check else " (-c 0)"))
    if not all(r.get("type") == "-" for r in rows):  # a barrier moves no bytes
        lines.append(f"# {'Avg bus bandwidth':<20} : {avg_busbw(rows) / GB:.4f}")
    lines.append("#")
    return lines


def table_lines(meta: dict, rows: Sequence[dict]) -> list[str]:
    extras = extra_columns(rows)
    return (header(meta) + column_header(extras) + [format_row(r, extras) for r in rows]
            + footer(rows, meta.get("check", True)))


def print_table(meta: dict, rows: Sequence[dict], file: Optional[TextIO] = None) -> None:
    out = file if file is not None else sys.stdout
    out.write("\n".join(table_lines(meta, rows)) + "\n")
    out.flush()


def to_json(meta: dict, rows: Sequence[dict]) -> dict:
    doc = {"collective": meta.get("collective"), "nranks": meta.get("nranks"),
           "transport": meta.get("transport"),
           "units": {"size": "bytes", "time_us": "microseconds", "algbw": "bytes/s", "busbw": "bytes/s"}}
    doc.update({k: v for k, v in meta.items() if k not in doc})
    doc["avg_busbw"] = avg_busbw(rows)
    doc["wrong"] = total_wrong(rows) if meta.get("check", True) else None
    doc["rows"] = list(rows)
    return doc


def write_json(path: str, meta: dict, rows: Sequence[dict]) -> None:
    text = json.dumps(to_json(meta, rows), indent=2)
    if path == "-":
        sys.stdout.write(text + "\n")
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
