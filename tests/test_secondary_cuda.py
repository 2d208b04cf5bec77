"""The secondary runner on CUDA frames (what pyinfer maps from CUDA memory): crops and top-1 as on the CPU, and the
batch's frames never leave the GPU. Skipped without a GPU (runs on the GPU machine: needs no GStreamer)."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from classifier_models import LABELS

from inferstream.inference import InferConfig
from inferstream.ops.crop import crop_resize
from inferstream.rawframe import RawFrame
from inferstream.secondary import ObjectClassifier, ObjectFrame

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _frames(device: str) -> list[RawFrame]:
    """Two smooth-ish RGB and NV12 frames (the formats CUDA memory carries), as plane views on ``device``."""
    g = torch.Generator().manual_seed(0)
    rgb = (torch.rand((1, 3, 36, 48), generator=g) * 255).to(torch.uint8)
    rgb = torch.nn.functional.interpolate(rgb.float(), size=(360, 480), mode="bilinear").to(torch.uint8)
    rgb = rgb[0].permute(1, 2, 0).contiguous()
    y = (torch.rand((360, 480), generator=g) * 219 + 16).to(torch.uint8)
    uv = (torch.rand((180, 240, 2), generator=g) * 224 + 16).to(torch.uint8)
    return [RawFrame("RGB", 480, 360, (rgb.to(device),)), RawFrame("NV12", 480, 360, (y.to(device), uv.to(device)))]


BOXES = [torch.tensor([[10.0, 20.0, 60.0, 140.0], [300.0, 100.0, 479.0, 359.0]]),
         torch.tensor([[0.0, 0.0, 480.0, 360.0], [200.0, 150.0, 212.0, 170.0], [5.0, 5.0, 40.0, 300.0]])]


@needs_gpu
def test_crop_resize_on_cuda_matches_the_cpu() -> None:
    image = _frames("cpu")[0].planes[0]
    boxes, ids = torch.tensor([[10, 20, 60, 140], [300, 100, 479, 359]]), torch.tensor([0, 0])
    cpu = crop_resize([image], boxes, ids, (64, 64))
    gpu = crop_resize([image.cuda()], boxes, ids, (64, 64))
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-5, rtol=0)


@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_object_classifier_on_cuda_frames_agrees_with_the_cpu(precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # fp32 means fp32: cuDNN's convolutions default to TF32 on Ampere and later (4e-4 off on the H200)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    cfg = InferConfig(model="classifier_models:resnet18_seeded", labels=LABELS, input_size=(64, 64), objects=True)
    cpu = ObjectClassifier(cfg)
    gpu = ObjectClassifier(replace(cfg, device="cuda", precision=precision))
    want = cpu.infer([ObjectFrame(f, b) for f, b in zip(_frames("cpu"), BOXES)])
    got = gpu.infer([ObjectFrame(f, b) for f, b in zip(_frames("cuda"), BOXES)])
    assert [len(d) for d in got] == [2, 3] and all(d.labels.device.type == "cpu" for d in got)
    tol = 1e-4 if precision == "fp32" else 2e-2
    for w, g in zip(want, got):
        torch.testing.assert_close(g.scores, w.scores, atol=tol, rtol=0)
        if precision == "fp32":
            assert g.labels.tolist() == w.labels.tolist()
