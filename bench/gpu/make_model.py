#!/usr/bin/env python3
"""Build the benchmark model HERE (ultralytics is not installed on the GPU machine) and save it as TorchScript.

    . .venv/bin/activate && python bench/gpu/make_model.py          # -> .gpu-carry/models/yolo11s-random.torchscript

The network is ``YOLO('yolo11s.yaml')`` with random weights (seed 0), fused and in export mode, so its output is
what the ONNX export gives: ``(B, 84, 8400)``. It is traced at 1x3x640x640 (the trace keeps the batch dimension
dynamic) and its parameters are stored in fp16 (19 MB instead of 37 MB: the carried tree must stay small);
``precision=fp32`` loads them upcast, so the fp32 correctness check compares the same weights on CPU and GPU.

Ultralytics' random init gives an input-independent network: every class score is the head's bias prior
(~1e-4), so there would be no detection at all and NMS, metadata and tracking would vanish from the benchmark (and
the CPU-vs-GPU check would compare nothing). So the random weights are rescaled, layer by layer, to unit output
variance on a few moving-SMPTE frames (data-dependent "LSUV" init: same architecture, same FLOPs, still random),
and one class bias, shared by all classes, is chosen so that those frames give a realistic load at conf 0.25
(some tens of detections per frame after NMS). ``config.txt`` records the seed, the bias and the counts.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

os.environ.setdefault("YOLO_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / ".gpu-carry" / "models" / "yolo11s-random.torchscript"


def build(seed: int) -> torch.nn.Module:
    from ultralytics import YOLO

    torch.manual_seed(seed)
    model = YOLO("yolo11s.yaml").model.float().fuse(verbose=False).eval()
    for m in model.modules():
        if type(m).__module__ == "ultralytics.nn.modules.head" and isinstance(getattr(m, "export", None), bool):
            m.export = True
    model.requires_grad_(False)
    return model


def class_bias_convs(model: torch.nn.Module) -> list[torch.nn.Conv2d]:
    head = model.model[-1]
    return [branch[-1] for branch in head.cv3]


def class_biases(model: torch.nn.Module, x: torch.Tensor, convs: list[torch.nn.Conv2d], share: float) -> list[float]:
    """Set each level's class bias so that ``share`` of its anchors have a best class score above 0.25."""
    logits: dict[torch.nn.Module, torch.Tensor] = {}
    hooks = [c.register_forward_hook(lambda m, i, o: logits.__setitem__(m, o.float())) for c in convs]
    try:
        with torch.no_grad():
            for c in convs:
                c.bias.zero_()
        with torch.inference_mode():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    threshold = float(torch.logit(torch.tensor(0.25)))
    biases = []
    with torch.no_grad():
        for c in convs:
            best = logits[c].amax(dim=1).flatten()  # best class logit per anchor, all images
            b = threshold - float(torch.quantile(best, 1 - share))
            c.bias.fill_(b)
            biases.append(b)
    return biases


def unit_variance(model: torch.nn.Module, x: torch.Tensor, passes: int = 2) -> None:
    """Scale each conv (weights and bias) so its output has unit std on ``x``, in forward order within one pass
    (a forward hook rescales the conv and hands the rescaled output on), as LSUV initialisation does."""
    head = model.model[-1]
    skip = set(head.dfl.modules()) if hasattr(head, "dfl") else set()
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m not in skip]

    def rescale(m: torch.nn.Conv2d, _inp: object, out: torch.Tensor) -> torch.Tensor:
        s = max(float(out.float().std()), 1e-12)
        m.weight.div_(s)
        if m.bias is not None:
            m.bias.div_(s)
        return out / s

    hooks = [c.register_forward_hook(rescale) for c in convs]
    try:
        with torch.no_grad():
            for _ in range(passes):
                model(x)
    finally:
        for h in hooks:
            h.remove()


def smpte_frames(n: int, size: tuple[int, int] = (1080, 1920)) -> list[torch.Tensor]:
    """n RGB frames (H, W, 3 uint8) of the moving SMPTE pattern run_bench.py encodes (GStreamer here)."""
    import gi

    gi.require_version("Gst", "1.0")
    from gi.repository import Gst

    Gst.init(None)
    h, w = size
    pipe = Gst.parse_launch(f"videotestsrc pattern=smpte horizontal-speed=7 num-buffers={n * 20} ! "
                            f"video/x-raw,format=RGB,width={w},height={h} ! appsink name=s sync=false")
    sink = pipe.get_by_name("s")
    pipe.set_state(Gst.State.PLAYING)
    frames = []
    for i in range(n * 20):
        sample = sink.emit("try-pull-sample", 5 * Gst.SECOND)
        if i % 20:
            continue
        buf = sample.get_buffer()
        _ok, info = buf.map(Gst.MapFlags.READ)
        stride = len(info.data) // h
        arr = torch.frombuffer(bytearray(info.data), dtype=torch.uint8).view(h, stride)[:, : w * 3].reshape(h, w, 3)
        frames.append(arr.clone())
        buf.unmap(info)
    pipe.set_state(Gst.State.NULL)
    return frames


def counts(model: torch.nn.Module, frames: list[torch.Tensor], conf: float) -> tuple[float, float]:
    """Mean candidates (> conf) and mean detections after NMS per frame, through inferstream's own path."""
    from inferstream.models.base import DecodeParams
    from inferstream.models.yolo import AnchorFreeDecoder
    from inferstream.ops.letterbox import preprocess_batch
    from inferstream.rawframe import RawFrame

    raw = [RawFrame("RGB", f.shape[1], f.shape[0], (f,)) for f in frames]
    x, _ = preprocess_batch(raw, (640, 640), "cpu", torch.float32)
    with torch.inference_mode():
        out = model(x)
    cand = float((out[:, 4:].amax(dim=1) > conf).sum(dim=1).float().mean())
    dets = AnchorFreeDecoder(80)([out], DecodeParams(conf=conf))
    return cand, sum(len(d) for d in dets) / len(dets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--share", type=float, default=0.02,
                    help="share of each level's anchors whose best class score passes 0.25 (candidates for NMS)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    from inferstream.ops.letterbox import preprocess_batch
    from inferstream.rawframe import RawFrame

    model = build(args.seed)
    frames = smpte_frames(4)
    convs = class_bias_convs(model)
    with torch.no_grad():
        for c in convs:
            c.bias.zero_()
    x, _ = preprocess_batch([RawFrame("RGB", f.shape[1], f.shape[0], (f,)) for f in frames[:2]], (640, 640),
                            "cpu", torch.float32)
    unit_variance(model, x)
    bias = class_biases(model, x, convs, args.share)
    cand, dets = counts(model, frames, args.conf)
    print(f"class biases {[round(b, 3) for b in bias]}: candidates {cand:.1f}, detections {dets:.1f} per frame")


    # the head caches its anchor grid per input shape (batch included): run the traced shape first, so the trace
    # bakes the grid as constants instead of recomputing it from the stride tensor (which would cost three
    # device-to-host syncs per forward on a GPU, and make the forward uncapturable as a CUDA graph)
    example = torch.rand(1, 3, 640, 640)
    with torch.inference_mode():
        model(example)
    traced = torch.jit.trace(model, example, strict=False, check_trace=False)
    ops = str(traced.inlined_graph)
    assert "aten::ScalarImplicit" not in ops and "aten::arange" not in ops, "anchor grid was traced, not baked"
    check = traced(torch.rand(2, 3, 640, 640))
    assert tuple(check.shape) == (2, 84, 8400), check.shape
    traced = traced.half()
    meta = {"names": {i: n for i, n in model.names.items()}, "imgsz": [640, 640], "task": "detect", "stride": 32,
            "end2end": False, "args": {"dynamic": False},
            "inferstream": {"source": "YOLO('yolo11s.yaml'), random weights", "seed": args.seed,
                            "init": "unit-variance rescaled", "class_biases": [round(b, 4) for b in bias],
                            "smpte_candidates_per_frame": round(cand, 1),
                            "smpte_detections_per_frame": round(dets, 1), "weights": "fp16"}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(traced, str(args.out), _extra_files={"config.txt": json.dumps(meta)})
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB): {meta['inferstream']}")


if __name__ == "__main__":
    main()
