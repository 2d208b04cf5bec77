"""The app's ``vlm:`` section: pyvlm in each stream's chain, validated against the element, answers published."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from app.media import BLOBS

from inferstream.app.api import run
from inferstream.app.config import ConfigFileError, load_config
from inferstream.app.pipeline import build_plan


def _cfg(tmp_path: Path, vlm: object) -> dict:
    return {"sources": [{"id": "bars", "test": "smpte", "num-buffers": 4, "width": 160, "height": 120}],
            "infer": BLOBS, "tracker": {}, "vlm": vlm, "osd": {},
            "messages": {"conv": {"schema": "inferstream-frame", "frame-interval": 1000},
                         "broker": {"proto": "file", "conn-str": str(tmp_path / "{id}.jsonl")}}}


def test_app_vlm_section_runs_pyvlm_on_tracked_crops_and_publishes_answers(tmp_path: Path, tiny_vlm: Path) -> None:
    cfg = _cfg(tmp_path, {"model": str(tiny_vlm), "mode": "objects", "sync": True, "interval": 2,
                          "max-new-tokens": 3, "prompt": "what is this ?"})
    chain = build_plan(load_config(cfg)).streams[0].description
    assert chain.index("pytracker") < chain.index("pyvlm name=bars_vlm") < chain.index("pyosd")
    result = run(cfg)
    assert result.exit_code == 0 and result.frames == {"bars": 4}
    docs = [json.loads(line) for line in (tmp_path / "bars.jsonl").read_text().splitlines()]
    answers = [d for d in docs if d["schema"] == "inferstream.vlm-answer/1"]
    assert answers and {d["stream_id"] for d in answers} == {"bars"} and {d["frame"] for d in answers} <= {0, 2}
    assert all(d["text"] and d["object"]["label"] in ("red", "green", "blue") for d in answers)


@pytest.mark.parametrize(("vlm", "message"), [
    ({}, "vlm needs model"),
    ({"model": "m", "promt": "x"}, "promt"),
])
def test_app_vlm_section_problems_name_the_key(tmp_path: Path, vlm: dict, message: str) -> None:
    with pytest.raises(ConfigFileError, match=message):
        load_config(_cfg(tmp_path, vlm))
