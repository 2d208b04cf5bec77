"""Where a TorchScript YOLO's forward spends its device time, and what splitting each convolution's bias out of
``aten::_convolution`` gives (so that TorchScript's fuser can merge the bias add with the SiLU after it).

Why: the app's kernel samples show the model server's time going mostly to non-vectorised elementwise ``add``
kernels, copies and SiLU, not to the convolutions. PyTorch's cuDNN path adds a convolution's bias in a separate
broadcasting kernel; the fuser cannot merge it with anything while it is inside ``aten::_convolution``.

    python bench/gpu/conv_bias.py --model .gpu-carry/models/yolo11s-random.torchscript --out DIR

Per variant (as loaded; frozen; frozen with the bias split; ``inductor``: compiled as pyinfer's ``graph=inductor``
compiles it, ``backends.compiled``): replay rate of one CUDA graph at batch 8 and 32
(channels_last fp16), the largest output difference to the loaded model, and the device time per forward by
kernel kind (torch's profiler over graph replays). On a CPU it checks the rewrite's outputs only.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_graph import capture, replay_rate

KINDS = (("conv", r"xmma|conv2d|implicit_gemm|nvjet|cudnn|sm\d\d_"), ("bias/residual add", r"CUDAFunctor_add"),
         ("copy", r"direct_copy|copy_kernel"), ("silu", r"silu_kernel"), ("fused (TorchScript fuser)", r"^fused_"),
         ("cat", r"Cat"), ("pool/upsample", r"max_pool|upsample"))


def split_conv_bias(module: Any) -> Any:
    """A frozen copy of ``module`` whose convolutions run without their bias, each followed by an explicit add of
    it (a constant ``1×C×1×1`` tensor), which the fuser can merge with the activation that follows."""
    import torch

    frozen = torch.jit.freeze(module.eval())
    graph = frozen.graph
    for conv in list(graph.findAllNodes("aten::_convolution")):
        bias = conv.inputsAt(2)
        if bias.node().kind() != "prim::Constant" or not isinstance(bias.type(), torch._C.TensorType):
            continue
        value = bias.node().t("value")
        with graph.insert_point_guard(conv):  # constants go before the convolution, the add right after it
            none = graph.insertConstant(None)
            shaped = graph.insertConstant(value.reshape(1, -1, 1, 1).contiguous())
            alpha = graph.insertConstant(1)
        conv.replaceInput(2, none)
        out = conv.output()
        added = graph.create("aten::add", [out, shaped, alpha], 1)
        added.insertAfter(conv)
        added.output().setType(out.type())
        out.replaceAllUsesAfterNodeWith(added, added.output())
    torch._C._jit_pass_lint(graph)
    torch._C._jit_pass_dce(graph)
    return frozen


def kernel_kinds(graph: Any, reps: int, b: int) -> dict[str, float]:
    """Device µs per image by kernel kind over ``reps`` replays of ``graph``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            graph.replay()
        torch.cuda.synchronize()
    kinds: collections.Counter[str] = collections.Counter()
    for event in prof.key_averages():
        us = getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)
        kind = next((k for k, pattern in KINDS if re.search(pattern, event.key)), "other")
        kinds[kind] += us / reps / b
    kinds["total"] = sum(kinds.values())
    return {k: round(v, 2) for k, v in kinds.most_common()}


def copy_sources(model: Any, x: Any) -> list[list[Any]]:
    """The eager ops that launch copies, with their input shapes: ``[op, shapes, calls per forward, device µs]``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                         record_shapes=True) as prof:
        model(x)
        torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages(group_by_input_shape=True):
        us = getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)
        if us and event.key in ("aten::copy_", "aten::contiguous", "aten::clone", "aten::_to_copy"):
            rows.append([event.key, str(event.input_shapes)[:120], event.count, round(us, 1)])
    return sorted(rows, key=lambda r: -r[3])[:12]


def first_tensor(out: Any) -> Any:
    return out[0] if isinstance(out, (list, tuple)) else out


def main() -> None:
    import torch

    from inferstream.backends.compiled import InductorForward

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--variants", default="as loaded,frozen,bias split", help="comma-separated: as loaded, frozen, "
                    "bias split, inductor (pyinfer's graph=inductor: one compilation for every batch size)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device, dtype = (torch.device("cuda"), torch.half) if cuda else (torch.device("cpu"), torch.float)
    fmt = torch.channels_last
    torch.manual_seed(0)
    loaded = torch.jit.load(args.model, map_location=device).to(dtype).eval().to(memory_format=fmt)
    builders = {"as loaded": lambda: loaded, "frozen": lambda: torch.jit.freeze(loaded.eval()),
                "bias split": lambda: split_conv_bias(loaded), "inductor": lambda: InductorForward(loaded)}
    report: dict[str, Any] = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
                              "variants": {}}
    x = torch.rand(2, 3, args.imgsz, args.imgsz, device=device, dtype=dtype).contiguous(memory_format=fmt)
    with torch.inference_mode():
        reference = first_tensor(loaded(x)).float()
    for name in args.variants.split(","):
        build = builders[name]
        row: dict[str, Any] = {}
        with torch.inference_mode():
            model = build()
            for _ in range(3):  # the profiling executor specialises (and fuses) after a few calls
                out = first_tensor(model(x)).float()
        row["max_abs_diff"] = float((out - reference).abs().max())
        row["scale"] = float(reference.abs().max())
        if cuda:
            for b in (8, 32):
                xb = torch.rand(b, 3, args.imgsz, args.imgsz, device=device, dtype=dtype).contiguous(memory_format=fmt)
                graph, _ = capture(model, xb)
                row[f"img_s_b{b}"] = round(replay_rate(graph, b), 1)
                if b == 32:
                    row["device_us_per_image_b32"] = kernel_kinds(graph, 20, b)
                    if name != "inductor":
                        row["copies_eager_b32"] = copy_sources(model, xb)
        report["variants"][name] = row
        print(name, json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "conv_bias.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
