"""--print-pipeline: a gst-launch line that GStreamer parses back into the same elements."""
from __future__ import annotations

import shlex
from pathlib import Path

import gi
import pytest

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from app.media import BLOBS
from inferstream.app.cli import main
from inferstream.app.config import load_config
from inferstream.app.pipeline import build_plan

Gst.init(None)

CONFIG = {
    "sources": [{"id": "cam1", "file": "/videos/my clip.mp4", "max-frames": 5},
                {"id": "bars", "test": "smpte", "num-buffers": 7, "width": 320, "height": 240},
                {"uri": "rtsp://127.0.0.1:8554/cam"}],
    "infer": {**BLOBS, "confidence-threshold": 0.4},
    "osd": {"line-width": 3},
    "sink": {"type": "file", "path": "out dir/{id}.mp4"},
}


def _launch(config: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    import yaml

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path), "--print-pipeline"]) == 0
    return capsys.readouterr().out.strip()


def test_print_pipeline_parses_with_gst_parse_launch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _launch(CONFIG, tmp_path, capsys)
    assert line.startswith("gst-launch-1.0 -e ")
    pipeline = Gst.parse_launch(line.split("gst-launch-1.0 -e ", 1)[1])
    names = {e.get_name() for e in pipeline.iterate_recurse()}
    assert {"cam1_src", "cam1_infer", "cam1_osd", "cam1_sink", "bars_infer", "stream2_src", "stream2_infer"} <= names
    assert pipeline.get_by_name("cam1_src").get_property("location") == "/videos/my clip.mp4"
    assert pipeline.get_by_name("cam1_sink").get_property("location") == "out dir/cam1.mp4"
    assert pipeline.get_by_name("cam1_limit").get_property("eos-after") == 6  # identity passes eos-after - 1
    assert pipeline.get_by_name("bars_src").get_property("num-buffers") == 7
    infers = [pipeline.get_by_name(f"{s}_infer") for s in ("cam1", "bars", "stream2")]
    assert {i.get_property("batch-group") for i in infers} == {"inferstream"}  # one batch-group for all streams
    assert {i.get_property("batch-size") for i in infers} == {3}
    assert infers[0].get_property("confidence-threshold") == pytest.approx(0.4)
    # the stream's name travels downstream from pyinfer
    assert [i.get_property("stream-id") for i in infers] == ["cam1", "bars", "stream2"]
    assert [i.get_property("source-id") for i in infers] == [0, 1, 2]
    assert pipeline.get_by_name("cam1_osd").get_property("line-width") == 3
    pipeline.set_state(Gst.State.NULL)


def test_print_pipeline_is_one_shell_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The shell splits the line into gst-launch arguments; gst_parse_launchv re-joins them to the same pipeline."""
    argv = shlex.split(_launch(CONFIG, tmp_path, capsys))
    assert argv[:2] == ["gst-launch-1.0", "-e"]
    pipeline = Gst.parse_launchv(argv[2:])
    assert pipeline.get_by_name("cam1_sink").get_property("location") == "out dir/cam1.mp4"
    pipeline.set_state(Gst.State.NULL)


def test_plan_orders_the_branch_and_ends_streams_at_the_entry_queue() -> None:
    plan = build_plan(load_config({**CONFIG, "tracker": {}, "infer": {**BLOBS, "secondary": [BLOBS]}}))
    cam1 = plan.streams[0]
    order = [cam1.description.index(f"name=cam1_{n}") for n in ("src", "limit", "entry", "infer", "infer2",
                                                                   "tracker", "osd", "sink")]
    assert order == sorted(order)
    assert (cam1.entry, cam1.infer, cam1.last, cam1.sinks) == ("cam1_entry", "cam1_infer", "cam1_osd", ("cam1_sink",))
    assert cam1.total_frames == 5 and plan.streams[1].total_frames == 7 and plan.streams[2].total_frames is None
    assert plan.streams[2].live and not cam1.live
    assert "first-id=1000001" in plan.streams[1].description  # per-stream track id ranges


def test_plan_tees_messages_after_the_analytics() -> None:
    plan = build_plan(load_config({**CONFIG, "messages": {}}))
    cam1 = plan.streams[0]
    d = cam1.description
    assert d.index("name=cam1_osd") < d.index("tee name=cam1_tee") < d.index("name=cam1_msgconv") \
        < d.index("name=cam1_msgbroker")
    assert len(cam1.sinks) == 2 and cam1.sinks[0] == "cam1_sink"
    pipeline = Gst.parse_launch(" ".join(s.description for s in plan.streams))
    assert pipeline.get_by_name(cam1.sinks[1]) is not None
    pipeline.set_state(Gst.State.NULL)


@pytest.mark.parametrize("osd", [True, False])
def test_plan_keeps_nvdec_frames_in_cuda_memory_up_to_the_analytics(osd: bool) -> None:
    """``device: cuda`` + ``decode: nvh264dec``: no videoconvert before pyinfer; a cudadownload right before the
    first element that needs system memory (pyosd, or the encoder when there is no OSD)."""
    from inferstream.app.pipeline import stream_plan

    cfg = load_config({**CONFIG, "decode": "avdec_h264", "tracker": {},
                       "infer": {**BLOBS, "device": "cuda"}, **({} if osd else {"osd": None})})
    gpu = stream_plan(cfg, 0, "cam1", on_gpu=True).description
    cpu = stream_plan(cfg, 0, "cam1").description
    assert "videoconvert ! video/x-raw,format=RGB ! pyinfer" in cpu and "cudadownload" not in cpu
    assert "videoconvert ! video/x-raw,format=RGB" not in gpu and "max-size-time=0 ! pyinfer name=cam1_infer" in gpu
    first_system = "name=cam1_osd" if osd else "x264enc"
    assert gpu.index("name=cam1_tracker") < gpu.index("cudadownload") < gpu.index(first_system)
    # without a GPU nvcodec registers no elements: the rest of the branch parses with an identity in its place
    assert Gst.parse_launch(gpu.replace("cudadownload", "identity")) is not None


def test_gpu_frames_needs_a_cuda_device_and_nvdec() -> None:
    from inferstream.app.pipeline import gpu_frames

    cfg = load_config({**CONFIG, "infer": {**BLOBS, "device": "cuda:0"}})
    file_src, test_src = cfg.sources[0], cfg.sources[1]
    assert gpu_frames(cfg, file_src, hardware=True) and not gpu_frames(cfg, file_src, hardware=False)
    assert not gpu_frames(cfg, test_src, hardware=True)  # videotestsrc makes system memory
    assert not gpu_frames(load_config(CONFIG), file_src, hardware=True)  # device cpu
