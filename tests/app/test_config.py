"""Config validation: every problem names its key path and YAML line; element sections are checked against the
real elements' properties; the CLI prints them without a traceback and exits 2."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.media import BLOBS
from inferstream.app.cli import main
from inferstream.app.config import ConfigFileError, load_config
from inferstream.app.yamlmap import load_yaml

GOOD = """\
sources:
  - id: cam1
    test: smpte
    num-buffers: 5
  - file: clip.mp4
    max-frames: 3
infer:
  model: blobs:color_blob_detector
  labels: [red, green, blue]
  confidence-threshold: 0.5
osd: {}
sink:
  type: file
  path: out/{id}.mp4
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigFileError) as info:
        load_config(_write(tmp_path, text))
    return [p.format("cfg.yaml") for p in info.value.problems]


def test_load_config_accepts_a_good_config(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, GOOD))
    assert cfg.stream_ids() == ["cam1", "stream1"]
    assert cfg.infer.properties["confidence-threshold"] == 0.5
    assert cfg.osd == {} and cfg.tracker is None and cfg.on_stream_error == "continue"


@pytest.mark.parametrize(("old", "new", "expected"), [
    # our own sections (pydantic): unknown key with a suggestion, wrong type, missing key, a bad literal
    ("osd: {}", "osd: {}\non-stream-eror: stop", ("cfg.yaml:12: on-stream-eror: unknown key 'on-stream-eror'; "
     "did you mean 'on-stream-error'?")),
    ("    max-frames: 3", "    max-frames: three",
     "cfg.yaml:6: sources[1].max-frames: Input should be a valid integer"),
    ("    max-frames: 3", "    max_frames: 3", ("cfg.yaml:6: sources[1].max_frames: unknown key 'max_frames'; "
     "did you mean 'max-frames'?")),
    ("  - file: clip.mp4", "  - file: clip.mp4\n    uri: rtsp://x/y",
     "cfg.yaml:5: sources[1]: give exactly one of file, uri, v4l2, test (got file, uri)"),
    ("osd: {}", "osd: {}\non-stream-error: maybe",
     "cfg.yaml:12: on-stream-error: Input should be 'continue' or 'stop'"),
    ("    num-buffers: 5", "    num-buffers: 0", "cfg.yaml:4: sources[0].num-buffers: Input should be greater than"),
    ("osd: {}", "osd: {}\nworkers: 0", ("cfg.yaml:12: workers: expected a whole number of at least 1, or auto "
     "(got 0)")),
    ("osd: {}", "osd: {}\nworkers: many", "cfg.yaml:12: workers: expected a whole number of at least 1, or auto"),
    ("osd: {}", "osd: {}\nworker-restarts: -1", "cfg.yaml:12: worker-restarts: Input should be greater than"),
    # element sections, checked against the real element
    ("  confidence-threshold: 0.5", "  confidence-treshold: 0.5", ("cfg.yaml:10: infer.confidence-treshold: pyinfer "
     "has no writable property 'confidence-treshold'; did you mean 'confidence-threshold'? Valid: backend, ")),
    ("  confidence-threshold: 0.5", "  confidence-threshold: 1.5", ("cfg.yaml:10: infer.confidence-threshold: "
     "pyinfer.confidence-threshold (float 0..1): 1.5 is outside 0..1")),
    ("  confidence-threshold: 0.5", "  batch-size: many", ("cfg.yaml:10: infer.batch-size: pyinfer.batch-size "
     "(int 1..256): expected an integer, got 'many'")),
    ("osd: {}", "osd:\n  line-width: 0", "cfg.yaml:12: osd.line-width: pyosd.line-width (int 1..64): 0 is outside"),
    ("  path: out/{id}.mp4", "  path: out/{id}.mp4\n  encoder: {speed-preset: warp}", ("cfg.yaml:15: "
     "sink.encoder.speed-preset: x264enc.speed-preset (enum: None | ultrafast")),
    ("  model: blobs:color_blob_detector", "  model: missing/best.onnx", ("cfg.yaml:8: infer.model: model file not "
     "found: missing/best.onnx")),
    ("  model: blobs:color_blob_detector", "  labels2: x", "cfg.yaml:7: infer.model: required key is missing"),
    ("  model: blobs:color_blob_detector", "  config-file: missing/config_infer_primary.txt", ("cfg.yaml:8: "
     "infer.config-file: config-file 'missing/config_infer_primary.txt': No such file")),
    # checks that need GStreamer: ids, patterns, decoders, sinks
    ("  - file: clip.mp4", "  - id: cam1\n    file: clip.mp4", ("cfg.yaml:5: sources[1].id: stream id 'cam1' is "
     "already used by sources[0]")),
    ("    test: smpte", "    test: plaid", ("cfg.yaml:3: sources[0].test: unknown pattern 'plaid'; videotestsrc has: "
     "smpte, snow")),
    ("  path: out/{id}.mp4", "  path: out/all.mp4", "cfg.yaml:14: sink.path: 2 streams would write the same file"),
    ("  type: file", "  type: rtsp", "cfg.yaml:13: sink.type: sink type 'rtsp' is not available here"),
    ("infer:", "decode: warp-decoder\ninfer:", ("cfg.yaml:7: decode: 'warp-decoder' is neither auto nor software nor "
     "a decoder element")),
    ("  - file: clip.mp4", "  - uri: nosuch://x/y", ("cfg.yaml:5: sources[1].uri: no GStreamer source element "
     "handles nosuch:// URIs")),
    ("  - file: clip.mp4", "  - file: a.mp4\n    file: b.mp4", "cfg.yaml:6: sources[1].file: duplicate key"),
    ("osd: {}", "osd: {}\ntracker:\n  max-age: -1", ("cfg.yaml:13: tracker.max-age: pytracker.max-age (float "
     "0..3600): -1 is outside")),
])
def test_load_config_reports_key_path_and_line(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in GOOD
    problems = _problems(tmp_path, GOOD.replace(old, new, 1))
    assert any(p.startswith(expected) for p in problems), problems


def test_load_config_reports_every_problem_at_once(tmp_path: Path) -> None:
    text = GOOD.replace("confidence-threshold: 0.5", "confidence-threshold: 2").replace("test: smpte", "test: plaid")
    problems = _problems(tmp_path, text + "extra: 1\n")
    assert [p.split(":")[1] for p in problems] == ["3", "10", "15"]


def test_load_config_reports_yaml_syntax_with_line(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "sources:\n  - test: smpte\n infer: [\n")
    assert problems[0].startswith("cfg.yaml:3: (top level): YAML syntax"), problems


def test_load_config_names_an_element_that_is_not_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from inferstream.app import checks

    monkeypatch.setattr(checks, "SECTION_ELEMENTS", {**checks.SECTION_ELEMENTS, ("osd",): "nosuchosd"})
    problems = _problems(tmp_path, GOOD)
    assert any(p.startswith("cfg.yaml:11: osd: GStreamer element 'nosuchosd' is not available") for p in problems), \
        problems


def test_load_config_takes_a_dict_without_lines() -> None:
    cfg = load_config({"sources": [{"test": "ball", "num-buffers": 3}], "infer": BLOBS})
    assert cfg.sources[0].kind == "test"
    with pytest.raises(ConfigFileError, match=r"<dict>: infer\.iou: pyinfer has no writable property 'iou'"):
        load_config({"sources": [{"test": "ball"}], "infer": {**BLOBS, "iou": 0.5}})


def test_load_yaml_maps_keys_and_items_to_lines() -> None:
    data, lines = load_yaml("a:\n  b: 1\n  c:\n    - x\n    - y: 2\n")
    assert data == {"a": {"b": 1, "c": ["x", {"y": 2}]}}
    assert [lines.line_of(p) for p in (("a",), ("a", "b"), ("a", "c", 0), ("a", "c", 1, "y"), ("a", "zz"))] == \
        [1, 2, 4, 5, 1]


def test_cli_config_error_exits_2_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, GOOD.replace("confidence-threshold: 0.5", "confidence-threshold: 1.5"))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:10: infer.confidence-threshold:" in err and "Traceback" not in err


def test_cli_script_missing_config_exits_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "inferstream.app.cli", "run", str(tmp_path / "nope.yaml")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "nope.yaml: (top level): cannot read the config" in done.stderr and "Traceback" not in done.stderr


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(example: Path) -> None:
    from inferstream.app.pipeline import build_plan

    try:
        plan = build_plan(load_config(example))
    except ConfigFileError as exc:
        if "is not available" in str(exc):
            pytest.skip(f"needs an element or device missing here: {exc}")
        raise
    assert plan.streams


def test_a_model_file_no_backend_loads_is_refused_with_the_loaders_suffixes(tmp_path: Path) -> None:
    (tmp_path / "yolo11n.engine").write_bytes(b"serialized TensorRT engine")
    problems = _problems(tmp_path, GOOD.replace("blobs:color_blob_detector", str(tmp_path / "yolo11n.engine")))
    assert any(p.startswith(f"cfg.yaml:8: infer.model: {tmp_path / 'yolo11n.engine'}: no backend loads .engine files; "
                            "known suffixes: .onnx, .pt, .pth, .torchscript") for p in problems), problems


def test_a_python_file_factory_is_a_model_and_a_missing_file_is_named(tmp_path: Path) -> None:
    factory = tmp_path / "my_model.py"
    factory.write_text("def make():\n    raise RuntimeError('not called by the check')\n")
    assert load_config(_write(tmp_path, GOOD.replace("blobs:color_blob_detector", f"{factory}:make")))
    problems = _problems(tmp_path, GOOD.replace("blobs:color_blob_detector", f"{tmp_path / 'gone.py'}:make"))
    assert problems == [f"cfg.yaml:8: infer.model: model file not found: {tmp_path / 'gone.py'}"], problems
