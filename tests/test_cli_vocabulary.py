"""One vocabulary across the subcommands: -n/--ranks is ranks everywhere, --iters iterations, --dtype the
element type, --json JSON on stdout, --topology defaulting to this machine; the old spellings still work;
help texts say what the commands do; tables mark what needs marking (an uncalibrated model column, a
barrier's absent bandwidth) and notes agree with the table (channel counts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interlink.bench import report
from interlink.cli.main import main


def _interlink() -> list[str]:
    script = Path(sys.executable).parent / "interlink"
    return [str(script)] if script.exists() else [sys.executable, "-m", "interlink"]


def _help(cmd: str) -> str:
    return subprocess.run([*_interlink(), cmd, "--help"], capture_output=True, text=True, timeout=60).stdout


@pytest.mark.parametrize("cmd", ["run", "bench", "predict", "simulate"])
def test_n_and_ranks_mean_ranks_in_every_subcommand(cmd: str) -> None:
    text = " ".join(_help(cmd).split())
    assert "-n N, --" in text and "--ranks" in text, text[:400]


def test_bench_spells_iterations_dtype_and_json_as_the_others() -> None:
    text = _help("bench")
    for want in ("--iters", "--warmup_iters", "--dtype", "--ranks", "--json [FILE]"):
        assert want in text, want
    assert "--datatype" not in text  # the old spelling is a hidden alias
    # -n is ranks (3: not the default here), 2 iterations, float64 by both spellings, JSON on stdout with a bare --json
    for dtype_flag in ("--dtype", "--datatype", "-d"):
        proc = subprocess.run([*_interlink(), "bench", "all_reduce", "-n", "3", "--iters", "2", "-w", "1", "-b", "1K",
                               "-e", "1K", dtype_flag, "float64", "--json"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        doc = json.loads(proc.stdout)
        assert doc["nranks"] == 3 and doc["dtype"] == "float64" and doc["iters"] == 2 and doc["rows"][0]["oop_wrong"] == 0


def test_simulate_and_predict_default_to_this_machine(capsys) -> None:
    assert main(["simulate", "all_reduce", "--size", "1M", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert main(["predict", "all_reduce", "--size", "1M", "--json"]) == 0
    pred = json.loads(capsys.readouterr().out)
    assert sim["algorithm"].split("/")[0] == pred["algorithm"].split("/")[0]  # the model's choice, as the help says
    for cmd in ("predict", "simulate"):
        text = " ".join(_help(cmd).split())
        assert "'this'" in text and "default" in text
    assert "model's choice" in " ".join(_help("simulate").split())


def test_predict_refuses_more_ranks_than_the_spec_holds(capsys) -> None:
    assert main(["predict", "all_reduce", "-s", "1M", "-t", "2xcpu-host:ranks=3", "-n", "7"]) == 2
    assert "holds 6 ranks; cannot place 7" in capsys.readouterr().err
    assert main(["predict", "all_reduce", "-s", "1M", "-t", "2xcpu-host:ranks=3", "--ranks", "6"]) == 0
    assert main(["predict", "all_reduce", "-s", "1M", "-t", "cpu-host", "-n", "4"]) == 0  # cores may be shared


def test_predict_channel_note_agrees_with_its_table(capsys) -> None:
    assert main(["predict", "all_reduce", "-s", "1G", "-t", "2xdgx-h100", "--all"]) == 0
    out = capsys.readouterr().out
    rings = {int(ln.split()[-2]) for ln in out.splitlines() if ln.strip().startswith("ring ")}
    note = [ln for ln in out.splitlines() if "ring algorithms run" in ln]
    assert len(rings) == 1 and note and f"run {rings.pop()} channels" in note[0], out


def test_uncalibrated_model_column_is_marked_in_the_row_and_a_barrier_has_no_bandwidth() -> None:
    row = {"size": 1024, "count": 256, "type": "float32", "redop": "sum", "root": -1, "oop_time_us": 10.0,
           "oop_algbw": 1e8, "oop_busbw": 1e8, "oop_wrong": 0, "ip_time_us": 9.0, "ip_algbw": 1e8, "ip_busbw": 1e8,
           "ip_wrong": 0, "pred_busbw": 5.77e9, "algorithm": "fast"}
    extras = report.extra_columns([row])
    assert "5.77 " in report.format_row(row, extras) + " " and "5.77*" not in report.format_row(row, extras)
    assert "5.77*" in report.format_row(dict(row, pred_uncalibrated=True), extras)
    bar = dict(row, size=0, count=0, type="-", redop="none", oop_algbw=0.0, oop_busbw=0.0)
    line = report.format_row(bar, extras)
    assert "float32" not in line.split() and "0.00" not in line.split() and line.split().count("-") >= 5
    assert not any("Avg bus bandwidth" in ln for ln in report.footer([bar]))


def test_piped_tables_are_plain_and_whole() -> None:
    """Piped (not a terminal), `algorithms` and `topo` print plain lines, never cut, and each algorithm's
    summary is a whole sentence (not the first line of a wrapped docstring): an entry's wrapped lines
    (indented under the summary column) joined again are the whole entry."""
    out = subprocess.run([*_interlink(), "algorithms"], capture_output=True, text=True, timeout=60).stdout
    assert not any("│" in ln for ln in out.splitlines())
    lines: list = []
    for ln in out.splitlines():
        if ln.startswith(" ") and lines:
            lines[-1] += " " + ln.strip()
        else:
            lines.append(ln)
    assert lines[0].split() == ["collective", "algorithm", "summary"]
    chain = next(ln for ln in lines if "collnet_chain" in ln)
    assert "goes back down the chain; pipelined." in chain, chain
    summaries = [ln.split("  [params")[0].rstrip() for ln in lines[1:]]
    assert all(s.endswith((".", ")", "]")) or len(s.split()) < 4 for s in summaries), [s for s in summaries
                                                                                      if not s.endswith(".")][:3]
    topo = subprocess.run([*_interlink(), "topo", "-t", "dgx-h100"], capture_output=True, text=True, timeout=60).stdout
    assert "Intel Xeon Platinum 8480C" in topo and "nvls=True" in topo and not any("│" in ln for ln in topo.splitlines())


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_bench_model_column_prices_zero_byte_rows(collective: str, nranks: int) -> None:
    from interlink.cli.bench import add_predictions

    rows = [{"size": 0, "type": "float32", "root": -1, "algorithm": a} for a in ("ring", "fast")]
    add_predictions(rows, collective, nranks, "shm")
    assert all(r["pred_busbw"] == 0.0 for r in rows), rows  # a price (0 bytes move), not N/A (None)


@pytest.mark.parametrize("cmd", [[], ["run"], ["bench"], ["topo"], ["doctor"], ["algorithms"], ["plan"], ["predict"],
                                 ["simulate"]])
def test_help_is_wrapped_and_names_every_subcommand(cmd: list) -> None:
    """--help fits a terminal (argparse wraps it: no description printed as one 300-character line), and the
    top-level description names what the subcommands do."""
    out = subprocess.run([*_interlink(), *cmd, "--help"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "100"}).stdout
    assert out and max(len(ln) for ln in out.splitlines()) <= 100, [ln for ln in out.splitlines() if len(ln) > 100]
    if not cmd:
        text = " ".join(out.split())
        for word in ("benchmark", "topolog", "predict", "simulate", "plan", "hang"):
            assert word in text, word


def test_algorithms_show_takes_the_ranks_of_every_other_subcommand(capsys) -> None:
    """`-n`/`--ranks` are the number of ranks in `algorithms --show` too (its own spelling `--nranks` stays)."""
    firsts = []
    for flag in ("-n", "--ranks", "--nranks"):
        assert main(["algorithms", "--show", "all_reduce", "ring", flag, "3", "--count", "3"]) == 0
        firsts.append(capsys.readouterr().out.splitlines()[0])
    assert firsts == ["all_reduce/ring  nranks=3 count=3 root=0"] * 3


@pytest.mark.parametrize("cmd", [["topo", "--list"], ["algorithms"]])
def test_piped_tables_fit_the_width_and_keep_every_word(cmd: list) -> None:
    """Piped (not a terminal), `topo --list` and `algorithms` wrap their long text under its own column at
    COLUMNS (100 when unset): no line over the width, and the words are those of the unwrapped table."""
    runs = {}
    for cols in ("100", "1000"):
        out = subprocess.run([*_interlink(), *cmd], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "COLUMNS": cols}).stdout
        runs[cols] = out
    assert max(len(ln) for ln in runs["100"].splitlines()) <= 100
    assert max(len(ln) for ln in runs["1000"].splitlines()) > 100  # the text is long: wrapping was needed
    assert runs["100"].split() == runs["1000"].split()
