"""What a new user of the command line runs into: sizes that round to nothing, missing optional
packages (PyYAML, matplotlib), the bench table's notes and streaming, and readable pictures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from interlink.bench.sweep import MARKER
from interlink.cli.main import main

# ---- 1. sizes that round down to 0 elements per rank ------------------------------------------------


@pytest.mark.parametrize("cmd", ["predict", "simulate"])
@pytest.mark.parametrize("collective,size,smallest", [
    ("all_reduce", "3", 4),       # 3 bytes of float32: 0 elements
    ("all_reduce", "0", 4),
    ("all_gather", "16", 32),     # 16 // 4 // 8 ranks = 0 elements per rank
    ("reduce_scatter", "31", 32),
])
def test_size_of_zero_elements_is_an_error(capsys, cmd, collective, size, smallest):
    assert main([cmd, collective, "--size", size, "--topology", "dgx-h100"]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""  # nothing computed, nothing printed
    assert f"interlink {cmd}: --size {size} gives {collective} 0 elements of float32 per rank" in cap.err
    assert f"the smallest valid size is {smallest} bytes" in cap.err and f"--size {smallest} or more" in cap.err
    # the smallest valid size itself is fine
    assert main([cmd, collective, "--size", str(smallest), "--topology", "dgx-h100"]) == 0
    assert f" {smallest} B" in capsys.readouterr().out.splitlines()[0].replace("bytes", "B")


def test_smallest_size_follows_dtype_and_ranks(capsys):
    assert main(["predict", "all_gather", "-s", "7", "-t", "dgx-h100", "-n", "4", "-d", "float16"]) == 2
    assert "the smallest valid size is 8 bytes (2 B x 4 ranks)" in capsys.readouterr().err
    assert main(["predict", "all_gather", "-s", "8", "-t", "dgx-h100", "-n", "4", "-d", "float16"]) == 0
    capsys.readouterr()
    assert main(["simulate", "all_reduce", "-s", "1", "-t", "dgx-h100", "-d", "int8"]) == 0  # 1 element of int8
    capsys.readouterr()
    assert main(["predict", "barrier", "-s", "0", "-t", "dgx-h100"]) == 0  # a barrier moves no data


def test_sweep_checks_the_largest_node_count(capsys):
    assert main(["simulate", "all_gather", "-s", "1K", "-t", "dgx-h100", "--sweep-nodes", "1,2,...,64"]) == 2
    err = capsys.readouterr().err
    assert "the smallest valid size is 2048 bytes (4 B x 512 ranks)" in err and "at 64 nodes" in err


@pytest.mark.parametrize("cmd", ["predict", "simulate"])
def test_help_documents_the_size_rule(capsys, cmd):
    with pytest.raises(SystemExit):
        main([cmd, "--help"])
    out = capsys.readouterr().out
    assert "rounds down to 0 elements per rank" in out and "names the smallest valid size" in out


# ---- 2. --save x.yaml without PyYAML ---------------------------------------------------------------


def test_save_yaml_without_pyyaml_refuses_before_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml -> ImportError
    for name in ("x.yaml", "x.yml"):
        f = tmp_path / name
        assert main(["topo", "-t", "dgx-h100", "--save", str(f)]) == 2
        cap = capsys.readouterr()
        assert not f.exists()
        assert cap.out == ""
        assert "PyYAML" in cap.err and "pip install 'interlink[topology]'" in cap.err
    # JSON needs nothing
    f = tmp_path / "x.json"
    assert main(["topo", "-t", "dgx-h100", "--save", str(f)]) == 0
    assert json.loads(f.read_text())["interlink_topology"] == 1


def test_save_topology_can_refuse_the_json_fallback(tmp_path, monkeypatch):
    from interlink.topology import TopologyError, parse_topology
    from interlink.topology.io import save_topology

    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(TopologyError, match="interlink\\[topology\\]"):
        save_topology(parse_topology("cpu-host"), tmp_path / "t.yaml", json_fallback=False)
    assert not (tmp_path / "t.yaml").exists()


# ---- 3. --plot / --draw without matplotlib: the result first, then the error -------------------------


@pytest.fixture
def no_matplotlib(monkeypatch):
    for m in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, m, None)


def test_simulate_plot_without_matplotlib_prints_result(tmp_path, no_matplotlib, capsys):
    f = tmp_path / "p.png"
    assert main(["simulate", "all_reduce", "-s", "1M", "-t", "dgx-h100", "--plot", str(f)]) == 1
    cap = capsys.readouterr()
    assert "busbw" in cap.out and "time" in cap.out and "simulated in" in cap.out
    assert "plot:" not in cap.out and not f.exists()
    assert "matplotlib" in cap.err and "pip install 'interlink[plot]'" in cap.err
    # --json: the JSON (without a "plot" key), then the error
    assert main(["simulate", "all_reduce", "-s", "1M", "-t", "dgx-h100", "--plot", str(f), "--json"]) == 1
    cap = capsys.readouterr()
    d = json.loads(cap.out)
    assert d["busbw_gbps"] > 0 and "plot" not in d
    assert "pip install 'interlink[plot]'" in cap.err


def test_simulate_sweep_plot_without_matplotlib_prints_table(tmp_path, no_matplotlib, capsys):
    f = tmp_path / "s.png"
    assert main(["simulate", "all_reduce", "-s", "1M", "-t", "dgx-h100", "--sweep-nodes", "1,2",
                 "--plot", str(f)]) == 1
    cap = capsys.readouterr()
    assert "scaling efficiency" in cap.out and len([ln for ln in cap.out.splitlines() if ln.split()[:1] == ["2"]]) == 1
    assert not f.exists() and "pip install 'interlink[plot]'" in cap.err


def test_topo_draw_without_matplotlib_prints_topology(tmp_path, no_matplotlib, capsys):
    assert main(["topo", "-t", "cpu-host", "--draw", str(tmp_path / "t.png")]) == 1
    cap = capsys.readouterr()
    assert "topology cpu-host" in cap.out and "legend:" in cap.out and "drew" not in cap.out
    assert "pip install 'interlink[plot]'" in cap.err
    assert main(["topo", "-t", "cpu-host", "--json", "--draw", str(tmp_path / "t.png")]) == 1
    assert json.loads(capsys.readouterr().out)["summary"]["nranks"] == 2


# ---- 4. interlink bench: rows as they finish, the notes under the table, exit status on wrong values ---


def _row(size: int, algorithm: str, wrong: int = 0) -> dict:
    t = 10.0 + size / 1e3
    bw = size / (t * 1e-6)
    return dict(size=size, count=size // 4, type="float32", redop="none", root=0, oop_time_us=t, oop_algbw=bw,
                oop_busbw=bw, oop_wrong=wrong, ip_time_us=t, ip_algbw=bw, ip_busbw=bw, ip_wrong=0,
                algorithm=algorithm, nranks=2, transport="shm", iters=2, warmup=1)


def _fake_launch(monkeypatch, rows: list[dict], after_row: Callable[[int], None] = lambda i: None) -> None:
    """`interlink bench` with rank 0's event lines from ``rows`` instead of real ranks."""

    def launch(cmd: Any, nproc: int, *, env: Any = None, stdout: Any = None, stderr: Any = None, **kw: Any) -> int:
        def emit(ev: dict) -> None:
            stdout.write(f"[rank 0] {MARKER}{json.dumps(ev)}\n".encode())

        emit({"event": "start", "nranks": nproc, "transport": "shm", "sizes": len(rows), "pid": 1})
        for i, row in enumerate(rows):
            emit({"event": "row", "index": i, "total": len(rows), "row": row})
            after_row(i)
        emit({"event": "end"})
        return 0

    monkeypatch.setattr("interlink.launch.local.launch", launch)


def _data(text: str) -> list[list[str]]:
    return [ln.split() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


BCAST = ["bench", "broadcast", "-b", "64K", "-e", "1M", "-f", "4", "--ranks", "2"]


def test_bench_prints_each_row_when_its_size_is_done(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INTERLINK_PROFILE", str(tmp_path / "none.json"))
    rows = [_row(65536, "slots"), _row(1048576, "slots"), _row(4194304, "peer_buffers")]
    seen: list[str] = []

    def after_row(i: int) -> None:  # what a user sees while the next size runs
        seen.append(capsys.readouterr().out)

    _fake_launch(monkeypatch, rows, after_row)
    out_json = tmp_path / "o.json"
    assert main([*BCAST, "--json", str(out_json)]) == 0
    rest = capsys.readouterr().out
    assert "#  Collective broadcast, nranks 2" in seen[0] and "#wrong" in seen[0]
    for i, text in enumerate(seen):  # exactly one new row each time, and no footer before the end
        assert [int(c[0]) for c in _data(text)] == [rows[i]["size"]], text
        assert "# Avg bus bandwidth" not in text
    assert _data(rest) == [] and "# Wrong values         : 0 OK" in rest and "# Avg bus bandwidth" in rest
    # the JSON is what it was: every row, with the model column's value
    doc = json.loads(out_json.read_text())
    assert [r["size"] for r in doc["rows"]] == [65536, 1048576, 4194304]
    # every host-page path the runtime takes is priced from its Schedule (the streamed slots at 1 MiB,
    # the own-buffer broadcast at 4 MiB)
    assert all(r["pred_busbw"] > 0 for r in doc["rows"])
    assert doc["dtype"] == "float32" and doc["nranks"] == 2 and doc["wrong"] == 0


def test_bench_notes_why_model_is_na_and_how_to_calibrate(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INTERLINK_PROFILE", str(tmp_path / "none.json"))  # an uncalibrated host
    # a 'slots' row where the runtime would not take that path (a broadcast larger than a slot, 8 MiB: it
    # goes through the root's slot in chunks, 'slots_pipelined', or reads the root's buffer, 'peer_buffers'; up to a slot
    # the runtime may measure the slots against peer_buffers and keep them): the model refuses it, and says why
    _fake_launch(monkeypatch, [_row(65536, "slots"), _row(1048576, "slots"), _row(8388608, "slots")])
    assert main(BCAST) == 0
    out = capsys.readouterr().out
    data = _data(out)
    assert data[0][13] != "N/A" and data[1][13] != "N/A" and data[2][13] == "N/A"
    lines = out.splitlines()
    first = [i for i, ln in enumerate(lines) if ln.startswith("# note:")]
    assert first[0] > lines.index("# Wrong values         : 0 OK")  # under the table
    # each note wrapped to 100 columns, its continuation lines indented under its text
    assert all(len(ln) <= 100 for ln in lines[first[0]:])
    notes = []
    for i in first:
        j = i + 1
        while j < len(lines) and lines[j].startswith("#       ") and not lines[j].startswith("# note:"):
            j += 1
        notes.append(" ".join([lines[i]] + [ln[8:] for ln in lines[i + 1:j]]))
    na = [n for n in notes if "N/A" in n]
    assert len(na) == 1  # one line for every N/A of the table
    assert "'slots' at 8388608 B" in na[0] and "outside (0, 4194304]" in na[0]
    assert any("interlink bench --calibrate" in n and "default host parameters" in n for n in notes)


def test_bench_no_calibrate_note_with_a_profile(tmp_path, monkeypatch, capsys):
    from interlink.model.params import Profile, save_profile

    prof = tmp_path / "profile.json"
    save_profile(Profile({"host.call_us": 3.0}, {}, {"host": "testhost", "date": "2026-01-01"}), prof)
    monkeypatch.setenv("INTERLINK_PROFILE", str(prof))
    # (the one-shot all_reduce on 2 ranks: up to 8 KiB, hostpath all_reduce_oneshot_max_2)
    _fake_launch(monkeypatch, [_row(8192, "slots"), _row(131072, "ring")])
    assert main(["bench", "all_reduce", "-b", "8K", "-e", "128K", "--ranks", "2"]) == 0
    out = capsys.readouterr().out
    assert "--calibrate" not in out and "N/A" not in out


def test_bench_json_to_stdout_stays_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INTERLINK_PROFILE", str(tmp_path / "none.json"))
    _fake_launch(monkeypatch, [_row(65536, "slots"), _row(8388608, "slots")])  # 'slots' at 8 MiB: model N/A
    assert main([*BCAST, "--json", "-"]) == 0
    cap = capsys.readouterr()
    assert [r["size"] for r in json.loads(cap.out)["rows"]] == [65536, 8388608]
    assert "interlink bench: note: model N/A" in cap.err


def test_bench_wrong_values_exit_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INTERLINK_PROFILE", str(tmp_path / "none.json"))
    _fake_launch(monkeypatch, [_row(65536, "slots"), _row(262144, "slots", wrong=3)])
    assert main(BCAST) == 1
    cap = capsys.readouterr()
    assert "# Wrong values         : 3 FAILED" in cap.out and len(_data(cap.out)) == 2
    assert "interlink bench: 3 wrong values" in cap.err


def _interlink() -> list[str]:
    script = Path(sys.executable).parent / "interlink"
    return [str(script)] if script.exists() else [sys.executable, "-m", "interlink"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX launcher")
def test_bench_real_ranks_with_a_wrong_result_exit_1(tmp_path):
    """Rank 1's broadcast result is corrupted (a sitecustomize in the ranks' PYTHONPATH): the check
    counts it, the table says FAILED and the command exits 1, as nccl-tests does."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent("""
        import os
        if os.environ.get("RANK") == "1":
            import interlink
            _broadcast = interlink.broadcast

            def broadcast(tensor, *args, **kwargs):
                work = _broadcast(tensor, *args, **kwargs)
                tensor.reshape(-1)[0] += 1
                return work

            interlink.broadcast = broadcast
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    proc = subprocess.run([*_interlink(), "bench", "broadcast", "-b", "1K", "-e", "4K", "-f", "4", "--iters", "2", "-w", "1",
                           "--ranks", "2"], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = _data(proc.stdout)
    assert len(rows) == 2 and all(c[8] == "1" and c[12] == "1" for c in rows), proc.stdout
    assert "# Wrong values         : 4 FAILED" in proc.stdout
    assert "interlink bench: 4 wrong values" in proc.stderr


# ---- 5. pictures: which ranks a timeline shows, legends, labels that fit -----------------------------


def _res(nranks: int) -> Any:
    return SimpleNamespace(nranks=nranks)


def test_timeline_caption_says_which_ranks():
    from interlink.cli.simulate import timeline_caption

    assert timeline_caption(_res(128)).startswith("ranks 0-31 of 128 shown")
    assert timeline_caption(_res(128), max_ranks=64).startswith("ranks 0-63 of 128 shown")
    assert timeline_caption(_res(8)).startswith("all 8 ranks shown")


def test_topology_labels_fit_or_are_left_out():
    from interlink.cli.topo import MIN_LABEL_FONT, figure_width, label_plan, layout
    from interlink.topology import parse_topology

    for spec, hosts in (("dgx-h100", 4), ("16xdgx-h100", 4), ("gb200-nvl72", 4)):
        pos, _ = layout(parse_topology(spec), hosts)
        labels = {i: i.split("/")[-1] for i in pos}
        w = figure_width(pos)
        font, node, note = label_plan(pos, labels, w)
        assert font >= MIN_LABEL_FONT and note == "", spec
        # every label fits the gap to its neighbour in the row (0.6 em a character)
        xs = [p[0] for p in pos.values()]
        pt_per_unit = w * 72 * 0.8 / (max(xs) - min(xs) + 2)
        rows: dict[float, list[float]] = {}
        for x, y in pos.values():
            rows.setdefault(y, []).append(x)
        gap = min(b - a for v in rows.values() for a, b in zip(sorted(v), sorted(v)[1:]))
        assert 0.6 * font * max(map(len, labels.values())) <= gap * pt_per_unit, spec
    # a whole cluster: too many devices for labels, and the note says so
    pos, _ = layout(parse_topology("16xdgx-h100"), 16)
    font, node, note = label_plan(pos, {i: i for i in pos}, figure_width(pos))
    assert font == 0 and "device labels left out" in note and str(len(pos)) in note
    # one crowded row: the font would be unreadable, so no labels either
    crowded = {f"host{k}/very-long-device-name": (float(k), 0.0) for k in range(150)}
    font, node, note = label_plan(crowded, {i: i for i in crowded}, 30.0, max_labelled=1000)
    assert font == 0 and "too close" in note


def _capture_figures(monkeypatch) -> list:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figs: list = []
    orig = Figure.savefig

    def savefig(self, *a, **kw):
        figs.append(self)
        return orig(self, *a, **kw)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figs


def _is_png(f: Path) -> bool:
    return f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_timeline_plot_headless(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from interlink.cli.simulate import plot_result
    from interlink.sim import simulate_collective

    figs = _capture_figures(monkeypatch)
    res = simulate_collective("all_reduce", 1 << 30, "16xdgx-h100", algorithm="ring")
    f = tmp_path / "t.png"
    plot_result(res, str(f))
    assert _is_png(f) and f.stat().st_size > 10_000
    ax = figs[-1].axes[0]
    assert "ranks 0-31 of 128 shown" in ax.get_title()
    legend = ax.get_legend()
    assert legend is not None and any("phase 0" in t.get_text() for t in legend.get_texts())
    small = simulate_collective("all_reduce", 1 << 26, "dgx-h100", algorithm="tree")
    plot_result(small, str(f))
    assert "all 8 ranks shown" in figs[-1].axes[0].get_title()


def test_simulate_plots_headless(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    f = tmp_path / "p.png"
    assert main(["simulate", "all_reduce", "-s", "1M", "-t", "2xdgx-h100", "--plot", str(f)]) == 0
    assert _is_png(f) and f"plot: {f}" in capsys.readouterr().out
    g = tmp_path / "s.png"
    assert main(["simulate", "all_reduce", "-s", "1M", "-t", "dgx-h100", "--sweep-nodes", "1,2", "--plot", str(g)]) == 0
    assert _is_png(g)


def test_topology_drawing_headless(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from interlink.cli.topo import MIN_LABEL_FONT, draw
    from interlink.topology import parse_topology

    figs = _capture_figures(monkeypatch)
    f = tmp_path / "c.png"
    draw(parse_topology("16xdgx-h100"), str(f), max_hosts=16)  # a whole cluster: no per-device labels
    assert _is_png(f)
    ax = figs[-1].axes[0]
    assert "device labels left out" in ax.get_title() and not ax.texts
    draw(parse_topology("dgx-h100"), str(f))
    ax = figs[-1].axes[0]
    assert "gpu0" in [t.get_text() for t in ax.texts]
    assert all(t.get_fontsize() >= MIN_LABEL_FONT for t in ax.texts)


@pytest.mark.parametrize("cmd", [
    ["predict", "all_reduce", "--size", "1G", "--topology", "16xdgx-h100"],
    ["predict", "all_to_all", "--size", "1G", "--topology", "16xdgx-h100"],
    ["simulate", "all_reduce", "--size", "1G", "--topology", "16xdgx-h100"],
    ["simulate", "all_to_all", "--size", "64M", "--topology", "2xdgx-h100"],
    ["doctor"],
], ids=lambda c: " ".join(c[:2]))
def test_prose_lines_fit_100_columns(cmd, capsys):
    """The sentences a command prints (notes, the 'best on paper' and 'nccl default' lines, doctor's checks and
    advice) wrap at 100 columns, so a terminal or a pasted log shows them whole; tables (rows indented by
    two spaces, nccl-tests' columns) keep their width."""
    assert main(cmd) in (0, None)
    out = capsys.readouterr().out
    prose = [ln for ln in out.splitlines() if not ln.startswith("  ") or cmd == ["doctor"]]
    assert prose and all(len(ln) <= 100 for ln in prose), [ln for ln in prose if len(ln) > 100]
    if cmd[0] == "doctor":
        assert "lo unknown" not in out and "lo loopback" in out


WIDTH_CMDS = [
    ["bench", "all_reduce", "-b", "64K", "-e", "1M", "-f", "4", "--ranks", "2"],
    ["predict", "all_reduce", "--size", "1G", "--topology", "16xdgx-h100"],
    ["predict", "all_reduce", "--size", "8", "--topology", "2xdgx-a100", "--all"],
    ["doctor"],
    ["topo", "--topology", "dgx-h100"],
]


@pytest.mark.parametrize("cmd", WIDTH_CMDS, ids=lambda c: " ".join(c[:2]))
def test_output_lines_fit_100_columns(cmd, tmp_path, monkeypatch, capsys):
    """Every line of bench's notes (its closing note on the model column), of predict (the marked table rows
    included: '<- best, nccl'), of doctor, and topo's header and legend, is at most 100 columns. Left out: the
    nccl-tests table bench prints (its columns are nccl-tests'), topo's device and path tables."""
    if cmd[0] == "bench":
        monkeypatch.setenv("INTERLINK_PROFILE", str(tmp_path / "none.json"))  # the closing calibrate note
        _fake_launch(monkeypatch, [_row(32768, "slots"), _row(262144, "two_phase"), _row(1048576, "slots")])
    assert main(cmd) in (0, None)
    out = capsys.readouterr().out
    lines = out.splitlines()
    if cmd[0] == "bench":
        assert "--calibrate" in out
        lines = lines[lines.index("# Wrong values         : 0 OK"):]
    if cmd[0] == "topo":
        lines = [ln for ln in lines if ln.startswith(("topology ", "  ", "legend:", "        "))]
        assert lines[0].startswith("topology dgx-h100:") and any(ln.startswith("legend:") for ln in lines)
    if cmd[0] == "predict" and "--all" not in cmd:
        assert any(ln.endswith("<- best, nccl") for ln in lines)
    assert lines and all(len(ln) <= 100 for ln in lines), [ln for ln in lines if len(ln) > 100]


def test_sweep_progress_names_each_run_and_the_time_left(capsys):
    """`simulate --sweep-nodes` says on stderr which run it is in (node count and algorithm), the time left
    from the second node count on, and when it is done; the model's choice, the slowest run at large node
    counts (the cost model prices every algorithm, then the pick is simulated), has a line for each part;
    the published rows line their sizes up."""
    assert main(["simulate", "all_reduce", "--size", "1M", "--topology", "dgx-h100", "--sweep-nodes", "1,2,4"]) == 0
    cap = capsys.readouterr()
    err = [ln for ln in cap.err.splitlines() if ln.startswith("interlink simulate: [")]
    assert len(err) == 3 * 5  # ring, tree, hierarchical, the model's choice (two lines) at each node count
    assert "[1/3] 1xdgx-h100: ring (1 of 4; " in err[0] and "left" not in err[0]
    assert "[1/3] 1xdgx-h100: the model's choice: pricing every algorithm (4 of 4; " in err[3]
    assert "[1/3] 1xdgx-h100: the model's choice: simulating " in err[4]
    assert all("s left)" in ln for ln in err[5:])
    assert "3 node counts x 4 runs in" in cap.err
    pub = [ln for ln in cap.out.splitlines() if "GB/s  " in ln and ln.startswith("  ")]
    assert pub and len({ln.index(" GB/s") for ln in pub}) == 1  # one column for every published row


@pytest.mark.parametrize("algos", [None, "ring,recursive_doubling"])
def test_sweep_table_columns_line_up(algos, capsys, monkeypatch):
    """The sweep's table, piped: every row as wide as its heading, each number right-aligned under its
    heading (the model's choice names its pick in a column of its own, not inside the busbw column), within
    100 columns; the published sources wrap under their own column."""
    monkeypatch.setenv("COLUMNS", "100")
    cmd = ["simulate", "all_reduce", "--size", "1G", "--topology", "dgx-h100", "--sweep-nodes", "1,2"]
    assert main(cmd + (["--algorithm", algos] if algos else [])) == 0
    out = capsys.readouterr().out.splitlines()
    i = next(k for k, ln in enumerate(out) if ln.startswith("# nodes"))
    names, rows = out[i], out[i + 1:i + 3]
    assert all(len(r) == len(names) <= 100 for r in rows), [names, *rows]
    # every heading's right edge (and the algorithm column's left edge) is a column edge of every row
    ends = [m.end() for m in re.finditer(r"\S+", names) if m.group() not in ("#", "algorithm")]
    for r in rows:
        assert all(r[e - 1] != " " and (e == len(r) or r[e] == " ") for e in ends), r
    if algos is None:
        a = names.index("algorithm")
        assert all(r[a - 2:a] == "  " and r[a:].split()[0] in ("nvls", "nvls_tree") for r in rows)
        assert out[i - 1].startswith("#") and "model's choice" in out[i - 1]
    else:
        assert "recursive_doubling" in out[i - 1]
    assert all(len(ln) <= 100 for ln in out[i + 3:]), out[i + 3:]


@pytest.mark.parametrize("cmd", [
    ["simulate", "all_reduce", "--size", "1G", "--topology", "dgx-h100"],
    ["simulate", "all_reduce", "--size", "1000001", "--topology", "2xdgx-a100", "--algorithm", "ring"],
    ["simulate", "all_reduce", "--size", "1G", "--topology", "2xdgx-h100", "--algorithm", "nccl_tree"],
    ["simulate", "all_reduce", "--size", "4M", "--topology", "cpu-host", "--nranks", "4"],
])
def test_simulate_notes_are_plain_words_with_units(cmd, capsys):
    """Each note of `interlink simulate` says what it means in words with its units: no bare fractions
    ('1 of each link's bandwidth', 'efficiency 0.85'), no index notation ('local rank (0, 1, ...)[c]'),
    no parameter names standing alone ('reduction: gpu.hbm_gbps x gpu.reduce_passes, overlap 1'); the
    channels note counts the NICs and the channels on each (nccl_tree: two a NIC, one of each tree)."""
    assert main(cmd) == 0
    out = capsys.readouterr().out
    notes = [" ".join(b.split()) for b in re.split(r"\nnote: ", out.split("\nnote: ", 1)[1])]
    notes[-1] = notes[-1].split(" simulated in ")[0]
    assert notes
    text = " ".join(notes)
    for bad in ("[c]", "(0, 1,", "of each link's bandwidth", "efficiency 0.", "overlap 1", "overlap 0",
                "extrapolated exactly from their periodic regime", "distinct round patterns", "local rank",
                "model's choice (as interlink predict)"):
        assert bad not in text, (bad, notes)
    for n in notes:
        assert not n.startswith(("reduction:", "dependency-driven:")), n
    adding = next(n for n in notes if n.startswith("adding up the received data"))
    assert re.search(r"\d+\.\d GB/s a rank", adding) and "% of that time hides under the transfers" in adding
    if "dgx-h100" in cmd[5] and "--algorithm" not in cmd:
        assert any("in-switch reduction (NVLS)" in n and "85% of its links' bandwidth" in n for n in notes)
        assert any("NCCL protocol SIMPLE: every byte sent is data" in n for n in notes)
    if "ring" in cmd:
        assert any("NCCL protocol LL128: 95% of the bytes sent are data, the other 5% the protocol's flags" in n
                   for n in notes)
        assert any(n.startswith("8 channels:") and "one on each of the 8 network cards (NICs)" in n
                   and "from GPU k of each" in n for n in notes)
        assert any("size rounded down to 1000000 bytes: 250000 whole elements of 4 bytes" in n for n in notes)
        assert any("1 element (4 bytes)" in n and "upper bound" in n for n in notes)
    if "nccl_tree" in cmd:
        assert any(n.startswith("16 channels:") and "2 on each of the 8 network cards" in n for n in notes)
    if "cpu-host" in cmd:
        assert any(n.startswith("CPU ranks:") for n in notes)
