"""Fixtures for the app tests."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.media import CLIP_FRAMES, encode_clip


@pytest.fixture(scope="session")
def clips(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Four H.264 MP4 clips of 160x120 SMPTE bars, 6, 8, 10 and 12 frames long."""
    folder = tmp_path_factory.mktemp("clips")
    return [encode_clip(folder / f"clip{i}.mp4", n) for i, n in enumerate(CLIP_FRAMES)]
