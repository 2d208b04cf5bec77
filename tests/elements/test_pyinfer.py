"""pyinfer in real pipelines: every frame gets one relation meta, every input format gives the same boxes, the
stock overlay draws our boxes, and bad input ends in a clear bus error instead of a crash or a hang."""
from __future__ import annotations

from pathlib import Path

import gi
import numpy as np
import pytest
import torch

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import GLib, Gst, GstAnalytics
from gst_helpers import labelled_boxes, run_pipeline

from inferstream.meta.gstanalytics import read_detections

BLOBS = "model=blobs:color_blob_detector model-family=yolo-end2end labels=red,green,blue"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


def _relation_metas(buf: Gst.Buffer) -> int:
    return buf.get_n_meta(GstAnalytics.relation_meta_api_get_type())


@pytest.mark.parametrize("fmt", ["BGR", "RGBA", "BGRA", "RGBx", "BGRx", "NV12", "I420"])
def test_pyinfer_formats_give_the_rgb_boxes(fmt: str) -> None:
    """Odd width 333 makes GStreamer pad rows (strides): views must honour them."""
    caps = "width=333,height=250"
    base = f"videotestsrc pattern=smpte num-buffers=2 ! video/x-raw,format=RGB,{caps} ! tee name=t "
    desc = (base + f"t. ! queue ! pyinfer name=ref {BLOBS} ! fakesink "
            f"t. ! queue ! videoconvert ! video/x-raw,format={fmt},{caps} ! pyinfer name=dut {BLOBS} ! fakesink")
    result = run_pipeline(desc, {"ref": labelled_boxes, "dut": labelled_boxes}, timeout_s=60)
    assert result.eos and not result.errors
    (ref_names, ref_boxes), (dut_names, dut_boxes) = result.seen["ref"][0], result.seen["dut"][0]
    assert ref_names == dut_names == ["blue", "green", "red"]
    assert np.abs(ref_boxes - dut_boxes).max() <= 3, (ref_boxes, dut_boxes)


def test_pyinfer_blob_boxes_are_where_the_bars_are() -> None:
    result = run_pipeline(f"videotestsrc pattern=smpte num-buffers=1 ! video/x-raw,format=RGB,width=700,height=300 "
                          f"! pyinfer name=dut {BLOBS} ! fakesink", {"dut": labelled_boxes})
    names, boxes = result.seen["dut"][0]
    red = boxes[names.index("red")]
    # SMPTE: the red bar is the 6th of 7 top bars (x 500..600), 2/3 of the height
    assert abs(red[0] - 500) <= 2 and abs(red[2] - 600) <= 2 and red[1] <= 1 and abs(red[3] - 200) <= 3


def test_pyinfer_every_vtest_frame_has_one_relation_meta_and_boxes_inside(vtest: Path, person_onnx: Path) -> None:
    frames = 12
    desc = (f"filesrc location={vtest} ! decodebin ! videoconvert ! video/x-raw,format=RGB "
            f"! pyinfer name=dut model={person_onnx} ! identity name=out eos-after={frames + 1} ! fakesink")

    def check(buf: Gst.Buffer) -> tuple[int, int, bool]:
        meta = read_detections(buf)
        boxes = meta.dets.boxes_xyxy if meta else torch.zeros((0, 4))
        inside = bool(((boxes[:, 0] >= 0) & (boxes[:, 1] >= 0) & (boxes[:, 2] <= 768) & (boxes[:, 3] <= 576)).all())
        return _relation_metas(buf), len(boxes), inside

    result = run_pipeline(desc, {"out": check}, timeout_s=120)
    assert not result.errors
    seen = result.seen["out"]
    assert len(seen) == frames
    assert all(n_meta == 1 for n_meta, _, _ in seen)
    assert all(inside for _, _, inside in seen)
    assert sum(n for _, n, _ in seen) >= 3 * frames  # pedestrians are found on a typical frame


@pytest.mark.parametrize(("mode", "min_share"), [("fast", 1.0), ("resize-first", 0.8)])
def test_pyinfer_fast_preprocess_finds_the_exact_paths_pedestrians(vtest: Path, person_onnx: Path, mode: str,
                                                                    min_share: float) -> None:
    """preprocess=fast (the CUDA default: convert in float at full resolution, then resize) and resize-first
    (resize the NV12 planes, then convert) on the CPU: the real detector finds the same people as with the
    bit-exact path: as many per frame, boxes within 4 px (measured on these 6 frames: fast 23 of 23, resize-first
    21 of 23, whose other two are NMS picking a neighbouring candidate, 10-12 px away)."""
    frames = 6
    desc = (f"filesrc location={vtest} ! decodebin ! videoconvert ! video/x-raw,format=NV12 ! tee name=t "
            f"t. ! queue ! pyinfer name=exact model={person_onnx} preprocess=exact ! fakesink "
            f"t. ! queue ! pyinfer name=fast model={person_onnx} preprocess={mode} ! fakesink")
    pipeline_frames = frames + 1
    result = run_pipeline(desc.replace("decodebin !", f"decodebin ! identity eos-after={pipeline_frames} !"),
                          {"exact": labelled_boxes, "fast": labelled_boxes}, timeout_s=120)
    assert not result.errors and len(result.seen["exact"]) == len(result.seen["fast"]) == frames
    matched = total = 0
    for (_, exact), (_, fast) in zip(result.seen["exact"], result.seen["fast"]):
        assert abs(len(exact) - len(fast)) <= 1
        total += len(exact)
        for box in exact:
            if len(fast) and np.abs(fast - box).max(axis=1).min() <= 4:
                matched += 1
    assert total >= 3 * frames and matched >= min_share * total, (matched, total)


def test_objectdetectionoverlay_draws_pyinfer_boxes() -> None:
    """The stock overlay reads our ODMtd: pixels change on the red bar's box outline."""
    frames: list[np.ndarray] = []

    def grab(buf: Gst.Buffer) -> None:
        ok, m = buf.map(Gst.MapFlags.READ)
        assert ok
        frames.append(np.frombuffer(m.data, np.uint8).reshape(300, 700, 4).copy())
        buf.unmap(m)

    ARTIFACTS.mkdir(exist_ok=True)
    png = ARTIFACTS / "objectdetectionoverlay.png"
    desc = ("videotestsrc pattern=smpte num-buffers=1 ! video/x-raw,format=RGB,width=700,height=300 "
            f"! pyinfer {BLOBS} ! videoconvert ! objectdetectionoverlay ! video/x-raw,format=BGRA "
            f"! identity name=out ! tee name=t t. ! queue ! fakesink t. ! queue ! videoconvert ! pngenc "
            f"! filesink location={png}")
    plain = ("videotestsrc pattern=smpte num-buffers=1 ! video/x-raw,format=RGB,width=700,height=300 "
             "! videoconvert ! video/x-raw,format=BGRA ! identity name=out ! fakesink")
    assert not run_pipeline(desc, {"out": grab}).errors
    assert not run_pipeline(plain, {"out": grab}).errors
    drawn, original = frames
    changed = np.abs(drawn.astype(int) - original.astype(int)).max(axis=-1) > 0
    # the red bar's box spans x 500..600, y 0..200: its left edge column changed, far-away pixels did not
    assert changed[50:150, 498:503].any()
    assert not changed[250:, :100].any()
    assert png.stat().st_size > 0


# ---------------------------------------------------------------------------------------------- bad input --
def _error_of(desc: str) -> str:
    result = run_pipeline(desc, timeout_s=60)
    assert result.errors, f"expected an error from {desc}"
    return result.errors[0]


def test_pyinfer_missing_model_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.onnx"
    err = _error_of(f"videotestsrc num-buffers=1 ! video/x-raw,format=RGB ! pyinfer model={missing} ! fakesink")
    assert str(missing) in err


def test_pyinfer_auto_rect_on_a_fixed_input_model_is_a_bus_error(person_onnx: Path) -> None:
    err = _error_of(f"videotestsrc num-buffers=1 ! video/x-raw,format=RGB ! pyinfer model={person_onnx} "
                    "input-size=auto-rect ! fakesink")
    assert "auto-rect: not for this model, the model's input is fixed at 640x640" in err


def test_pyinfer_not_a_model_is_an_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a model" * 10)
    err = _error_of(f"videotestsrc num-buffers=1 ! video/x-raw,format=RGB ! pyinfer model={junk} ! fakesink")
    assert "junk.onnx" in err


def test_pyinfer_unknown_output_layout_suggests_model_family() -> None:
    err = _error_of("videotestsrc num-buffers=1 ! video/x-raw,format=RGB ! pyinfer model=blobs:odd_layout_model "
                    "! fakesink")
    assert "model-family" in err and "(1, 7, 3)" in err and "postprocess" in err


def test_pyinfer_cuda_graph_on_cpu_is_refused_at_start() -> None:
    err = _error_of(f"videotestsrc num-buffers=1 ! video/x-raw,format=RGB ! pyinfer {BLOBS} graph=cuda-graph "
                    "! fakesink")
    assert "graph=cuda-graph needs a CUDA device" in err


def test_pyinfer_unsupported_caps_fail_negotiation() -> None:
    """GRAY8 is not in pyinfer's caps: linking fails and says which caps it can't handle."""
    with pytest.raises(GLib.Error, match="can't handle caps video/x-raw, format=.*GRAY8"):
        run_pipeline(f"videotestsrc num-buffers=1 ! video/x-raw,format=GRAY8 ! pyinfer {BLOBS} ! fakesink")


def test_pyinfer_exception_during_inference_is_a_bus_error_not_a_hang() -> None:
    result = run_pipeline("videotestsrc num-buffers=10 ! video/x-raw,format=RGB ! pyinfer "
                          "model=blobs:fails_on_third_batch model-family=yolo-end2end labels=red,green,blue ! fakesink", timeout_s=60)
    assert result.errors and "inference failed" in result.errors[0] and "third batch" in result.errors[0]


def test_pyinfer_long_comma_labels_list_is_a_list_not_a_file_name() -> None:
    """300 labels (longer than a file name may be): the list is used, not tried as a path ("File name too long")."""
    labels = ",".join(["red", "green", "blue"] + [f"class-number-{i}" for i in range(300)])
    result = run_pipeline("videotestsrc pattern=smpte num-buffers=2 ! video/x-raw,format=RGB,width=320,height=240 "
                          "! pyinfer name=dut model=blobs:color_blob_detector model-family=yolo-end2end "
                          f"labels={labels} ! fakesink", {"dut": labelled_boxes})
    assert not result.errors
    assert all(set(names) <= {"red", "green", "blue"} and names for names, _ in result.seen["dut"])


def test_pyinfer_user_postprocess_function_is_used() -> None:
    result = run_pipeline("videotestsrc pattern=smpte num-buffers=2 ! video/x-raw,format=RGB,width=320,height=240 "
                          f"! pyinfer name=dut {BLOBS} postprocess=blobs:only_red_postprocess ! fakesink",
                          {"dut": labelled_boxes})
    assert not result.errors
    assert all(names == ["red"] for names, _ in result.seen["dut"])
