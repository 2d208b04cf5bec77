"""pyvlm throughput: answers/s of the in-process transformers backend by batch size, and the video pipeline's
frames/s without pyvlm, with it (async, the default: the video never waits) and with ``sync=true``, in one run.

    python bench/vlm_bench.py                                   # CPU, the tests' tiny LLaVA (random weights)
    python bench/vlm_bench.py --shape llava-3b --device cuda --dtype bfloat16 --batches 1,4,16,32 --tokens 32

Shapes (random weights, a WordLevel tokenizer made in code; no weights are downloaded):
  tiny      CLIP 64-wide x 2 layers (224 px, patch 32) + Llama 64-wide x 2 layers: the tests' model (~1.5 MB).
  llava-3b  CLIP ViT-L/14-336 (1024 wide, 24 layers, 577 image tokens) + a Llama of Qwen2.5-3B's size (2048 wide,
            36 layers, 16 heads / 2 KV heads, 11008 MLP, 151936 vocabulary, untied head): 3.7 B parameters, 7.4 GB in bf16.
Every answer has exactly ``--tokens`` new tokens (special tokens are suppressed: no early stop), so answers/s
compares batch sizes at equal work.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from vlm_models import TINY_TEXT, TINY_VISION, WORDS

SHAPES = {
    "tiny": (TINY_VISION, TINY_TEXT, len(WORDS)),
    "llava-3b": ({"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                  "image_size": 336, "patch_size": 14},
                 {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
                  "num_key_value_heads": 2}, 151936),
}


def build(folder: Path, shape: str, dtype: str) -> Path:
    """A LLaVA of ``shape`` with random weights saved to ``folder`` (the tests' tokenizer and chat template)."""
    from vlm_models import build_llava

    vision_kw, text_kw, vocab = SHAPES[shape]
    words = WORDS + [f"v{i}" for i in range(vocab - len(WORDS))]
    return build_llava(folder, vision_kw, text_kw, words, dtype=dtype, feature_layer=-2)


def answers_per_s(folder: Path, device: str, dtype: str, batches: list[int], tokens: int, repeats: int) -> dict:
    import numpy as np

    from inferstream.vlm.backends import BackendConfig, TransformersBackend
    from inferstream.vlm.types import VlmRequest

    backend = TransformersBackend(BackendConfig("transformers", str(folder), device, dtype, tokens))
    rng = np.random.default_rng(0)
    out = {}
    for b in batches:
        reqs = [VlmRequest((rng.integers(0, 255, (480, 640, 3), dtype=np.uint8),), "describe the image", "s", i, 0)
                for i in range(b)]
        backend.answer(reqs)  # warm-up (kernels, allocator)
        sync = _cuda_sync(device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            answers = backend.answer(reqs)
        sync()
        dt = time.perf_counter() - t0
        if any(a.error for a in answers):
            raise RuntimeError(f"batch {b}: {[str(a.error) for a in answers if a.error][:1]}")
        out[b] = {"answers_per_s": round(b * repeats / dt, 2), "ms_per_batch": round(1000 * dt / repeats, 1)}
        print(f"  batch {b:3d}: {out[b]['answers_per_s']:8.2f} answers/s  ({out[b]['ms_per_batch']} ms per batch)",
              flush=True)
    backend.close()
    return out


def _cuda_sync(device: str):
    import torch

    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def pipeline_fps(element: str, frames: int) -> float:
    """Frames/s of videotestsrc 640x480 RGB ! [element] ! fakesink, first to last buffer out of the chain."""
    from pyinfer_cpu import buffer_fps

    return buffer_fps(f"videotestsrc num-buffers={frames} pattern=ball ! video/x-raw,format=RGB,width=640,"
                      f"height=480,framerate=30/1 ! {element} identity name=out ! fakesink sync=false", warmup=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--interval", type=int, default=10, help="pyvlm interval in the pipeline runs")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    Gst.init(None)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / args.shape, args.shape, args.dtype)
        print(f"{args.shape} on {args.device} ({args.dtype}), {args.tokens} new tokens per answer", flush=True)
        results = {"shape": args.shape, "device": args.device, "dtype": args.dtype, "tokens": args.tokens,
                   "answers": answers_per_s(folder, args.device, args.dtype,
                                            [int(b) for b in args.batches.split(",")], args.tokens, args.repeats)}
        vlm = (f"pyvlm model={folder} device={args.device} dtype={args.dtype} max-new-tokens={args.tokens} "
               f"interval={args.interval}")
        runs = {"without pyvlm": "", "pyvlm async": f"{vlm} !", "pyvlm sync": f"{vlm} sync=true !"}
        results["pipeline_fps"] = {}
        for name, element in runs.items():
            fps = pipeline_fps(element, args.frames)
            results["pipeline_fps"][name] = round(fps, 1)
            print(f"  pipeline {name:14s}: {fps:8.1f} frames/s ({args.frames} frames, interval {args.interval})",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
