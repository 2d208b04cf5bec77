"""The cache directory: the sample data, the compiled C loops (``native.cc``), downloaded models.

``$INFERSTREAM_CACHE``, else ``.cache/`` of the checkout named by ``$INFERSTREAM_ROOT`` (set by activation), else
``~/.cache/inferstream``; created on first use."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    root = os.environ.get("INFERSTREAM_CACHE") or (Path(os.environ["INFERSTREAM_ROOT"]) / ".cache"
                                                   if "INFERSTREAM_ROOT" in os.environ
                                                   else Path.home() / ".cache" / "inferstream")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
