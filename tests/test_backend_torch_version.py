"""The torch versions the backend supports: the `torch` extra's lower bound, the docs and the backend's own
check agree, and an older torch gets a message naming the version it needs (not a hang in DDP)."""

from __future__ import annotations

import os
import re

import pytest

from interlink.backends.torch import MIN_TORCH, torch_version_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEED = ".".join(map(str, MIN_TORCH))


@pytest.mark.parametrize("version", ["2.5.0+cu124", "2.6.0", "1.13.1", "2.4.1+cpu"])
def test_an_older_torch_is_refused_naming_the_version_it_needs(version: str) -> None:
    msg = torch_version_problem(version)
    assert msg is not None and f"needs torch {NEED} or later" in msg and f"this is torch {version}" in msg
    assert f"torch>={NEED}" in msg


@pytest.mark.parametrize("version", [NEED + ".0", "2.13.0+cpu", "2.14.1", "2.15.0a0+git1234", "3.0.0", "weird"])
def test_a_supported_torch_passes(version: str) -> None:
    assert torch_version_problem(version) is None


def test_the_torch_extra_and_the_docs_state_the_same_range() -> None:
    pyproject = open(os.path.join(ROOT, "pyproject.toml")).read()
    extra = re.search(r'^torch = \["torch>=([\d.]+)"\]', pyproject, re.M)
    assert extra is not None and extra.group(1) == NEED, extra
    api = " ".join(open(os.path.join(ROOT, "docs", "api.md")).read().split())
    assert f"torch {NEED} or later" in api


def test_this_torch_is_supported() -> None:
    torch = pytest.importorskip("torch")
    assert torch_version_problem(torch.__version__) is None
