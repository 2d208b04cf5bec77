"""The correctness phase: the CUDA path against the CPU path on the same decoded frames, fp32 both."""
from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gi.repository import Gst
from measure import run_pipeline
from report import compare_detections

if TYPE_CHECKING:
    from run_bench import Bench


def check_correctness(bench: Bench) -> dict[str, Any]:
    """Same decoded frames through the CUDA path (device=cuda, CUDA memory) and the CPU path, both fp32.

    Three checks, from pixels to boxes: the model inputs the two paths build (colour conversion + letterbox:
    the CUDA default is the fast float path, a few levels off the CPU's exact one), the raw model
    outputs on them (relative error: float32 on two devices, TF32 off), and the detections (per frame, matched by
    label, box and score).
    """
    import torch

    from inferstream.backends.torch_backend import TorchBackend
    from inferstream.meta.gstanalytics import read_detections
    from inferstream.ops import letterbox

    saved_flags = _strict_fp32()
    seen: dict[str, dict[int, Any]] = {"gpu": {}, "gpuexact": {}, "cpu": {}}
    inputs: dict[str, list[Any]] = defaultdict(list)
    outputs: dict[str, list[Any]] = defaultdict(list)
    memory: dict[str, str] = {}
    recording = {"on": False}

    def probe(name: str) -> Callable[..., Gst.PadProbeReturn]:
        def fn(pad: Gst.Pad, info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
            buf = info.get_buffer()
            meta = read_detections(buf)
            memory.setdefault(name, pad.get_current_caps().to_string())
            seen[name][buf.pts] = meta.dets if meta is not None else None
            return Gst.PadProbeReturn.OK
        return fn

    def attach(pipeline: Gst.Pipeline) -> None:
        for name in seen:
            pipeline.get_by_name(name).get_static_pad("sink").add_probe(
                Gst.PadProbeType.BUFFER, lambda *_: (recording.__setitem__("on", True), Gst.PadProbeReturn.OK)[1])
            pipeline.get_by_name(name).get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, probe(name))

    orig_pre, orig_call = letterbox.preprocess_batch, TorchBackend.__call__

    def pre(frames: Any, size: Any, device: Any, dtype: Any, exact: bool | None = None, **options: Any) -> Any:
        batch, lb = orig_pre(frames, size, device, dtype, exact=exact, **options)
        if recording["on"] and not exact:  # the default path of each device (the GPU's exact branch aside)
            inputs[torch.device(device).type].append(batch.cpu().clone())
        return batch, lb

    def call(backend: Any, batch: Any) -> Any:
        out = orig_call(backend, batch)
        if recording["on"]:
            outputs[backend.device.type].append(out[0].float().cpu().clone())
        return out

    model, clip = bench.args.check_model, bench.args.check_clip
    if not (model.is_file() and clip.is_file()):  # make_check_inputs.py was not run: the bench model and clip
        model, clip = bench.model, bench.short_clip
    common = f"model={model} precision=fp32 batch-size=1"
    desc = (f"filesrc location={clip} ! qtdemux ! h264parse ! {bench.decoder} ! tee name=t "
            f"t. ! queue ! pyinfer name=gpu device={bench.device} batch-group=check-gpu {common} ! fakesink "
            f"t. ! queue ! pyinfer name=gpuexact device={bench.device} batch-group=check-gpuexact preprocess=exact "
            f"{common} ! fakesink "
            f"t. ! queue ! {bench.to_system} ! pyinfer name=cpu device=cpu batch-group=check-cpu {common} "
            f"! fakesink")
    letterbox.preprocess_batch, TorchBackend.__call__ = pre, call
    try:
        res = run_pipeline(desc, timeout_s=120, before_play=attach)
    finally:
        letterbox.preprocess_batch, TorchBackend.__call__ = orig_pre, orig_call
        _restore_fp32(saved_flags)
    res["caps"] = memory
    res["model"], res["clip"] = model.name, clip.name
    dev = "cpu" if bench.dry else "cuda"
    if inputs[dev] and inputs["cpu"] and not bench.dry:
        pairs = list(zip(inputs[dev], inputs["cpu"]))
        res["inputs_compared"] = len(pairs)
        res["input_max_abs_diff"] = max(float((a - b).abs().max()) for a, b in pairs)
        outs = list(zip(outputs[dev], outputs["cpu"]))
        res["model_output_rel_err"] = max(float((a - b).norm() / b.norm()) for a, b in outs) if outs else None
    res.update(compare_detections(seen["gpu"], seen["cpu"]))
    res["preprocess_exact_on_gpu"] = compare_detections(seen["gpuexact"], seen["cpu"])
    return res


def _strict_fp32() -> dict[str, Any]:
    """TF32 off for convolutions and matmuls (both the legacy flags and torch >= 2.9's fp32_precision)."""
    import torch

    saved: dict[str, Any] = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    for name, obj in (("conv_precision", getattr(torch.backends.cudnn, "conv", None)),
                      ("matmul_precision", torch.backends.cuda.matmul)):
        if obj is not None and hasattr(obj, "fp32_precision"):
            with contextlib.suppress(Exception):
                saved[name] = obj.fp32_precision
                obj.fp32_precision = "ieee"
    return saved


def _restore_fp32(saved: dict[str, Any]) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved["matmul"], saved["cudnn"]
    for name, obj in (("conv_precision", getattr(torch.backends.cudnn, "conv", None)),
                      ("matmul_precision", torch.backends.cuda.matmul)):
        if name in saved:
            with contextlib.suppress(Exception):
                obj.fp32_precision = saved[name]
