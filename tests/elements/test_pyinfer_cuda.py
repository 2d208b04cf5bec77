"""pyinfer on CUDA memory: caps negotiation (CUDA memory when device=cuda, system memory otherwise), zero-copy
frames from nvh264dec giving the boxes of the system-memory path, context mismatch and CUDA errors as bus errors;
and the torch backend's CUDA graphs.

The negotiation fallback runs everywhere; everything that needs a GPU, torch CUDA or GStreamer's nvcodec skips
with the reason (CPU CI stays green; bench/gpu/run.sh runs this file on the H200).
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import gi
import numpy as np
import pytest
import torch

gi.require_version("Gst", "1.0")
from gi.repository import Gst
from gst_helpers import labelled_boxes, run_pipeline

CUDA_MEMORY = "memory:CUDAMemory"
BLOBS = "model=blobs:color_blob_detector model-family=yolo-end2end labels=red,green,blue precision=fp32"


def _has(element: str) -> bool:
    return Gst.ElementFactory.find(element) is not None


HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs torch with a CUDA GPU (runs on the GPU machine, "
                                "see bench/gpu/README.md)")
needs_nvcodec = pytest.mark.skipif(
    not (HAS_CUDA and _has("nvh264dec") and _has("cudadownload") and _has("x264enc")),
    reason="needs a CUDA GPU, GStreamer's nvcodec (nvh264dec, cudadownload) and x264enc")


def _features(caps: Gst.Caps) -> list[str]:
    return [caps.get_features(i).to_string() for i in range(caps.get_size())]


def _sink_caps_query(device: str) -> Gst.Caps:
    element = Gst.ElementFactory.make("pyinfer")
    element.set_property("device", device)
    return element.get_static_pad("sink").query_caps(None)


# --- negotiation: runs everywhere --------------------------------------------------------------------------------
def test_pyinfer_templates_offer_cuda_memory_first() -> None:
    templ = Gst.ElementFactory.make("pyinfer").get_pad_template("sink").get_caps()
    assert _features(templ) == [CUDA_MEMORY, "memory:SystemMemory"]
    cuda_formats = templ.to_string().split(";")[0]
    assert all(f in cuda_formats for f in ("NV12", "RGBA", "BGRA", "RGBx", "BGRx", "RGB"))


def test_pyinfer_cpu_device_withdraws_cuda_memory_from_caps_queries() -> None:
    assert CUDA_MEMORY not in _features(_sink_caps_query("cpu"))


@pytest.mark.skipif(HAS_CUDA, reason="checks the fallback on a machine without a CUDA GPU")
def test_pyinfer_cuda_device_without_gpu_negotiates_system_memory() -> None:
    assert _features(_sink_caps_query("cuda")) == ["memory:SystemMemory"]


@needs_cuda
def test_pyinfer_cuda_device_offers_cuda_memory_when_available() -> None:
    features = _features(_sink_caps_query("cuda"))
    if not _has("cudaupload"):
        pytest.skip("GStreamer's CUDA library is not usable here")
    assert features[0] == CUDA_MEMORY and "memory:SystemMemory" in features


# --- the CUDA path ---------------------------------------------------------------------------------------------
H264 = ("videotestsrc pattern=smpte num-buffers=3 ! video/x-raw,format=I420,width=640,height=360 ! "
        "x264enc speed-preset=ultrafast tune=zerolatency ! h264parse ! nvh264dec ! ")


@needs_nvcodec
def test_pyinfer_nvh264dec_cuda_memory_boxes_match_the_system_memory_path() -> None:
    caps_seen: list[str] = []

    def cuda_boxes(buf: Gst.Buffer) -> tuple[list[str], np.ndarray]:
        return labelled_boxes(buf)

    desc = (H264 + "tee name=t "
            f"t. ! queue ! pyinfer name=gpu device=cuda batch-group=cuda-a {BLOBS} ! fakesink "
            f"t. ! queue ! cudadownload ! video/x-raw,format=NV12 ! pyinfer name=sys device=cpu batch-group=cuda-b "
            f"{BLOBS} ! fakesink")

    def started(pipeline: Gst.Pipeline) -> None:
        pad = pipeline.get_by_name("gpu").get_static_pad("sink")
        pad.add_probe(Gst.PadProbeType.BUFFER,
                      lambda p, _i: (caps_seen.append(p.get_current_caps().to_string()), Gst.PadProbeReturn.OK)[1])

    result = run_pipeline(desc, {"gpu": cuda_boxes, "sys": labelled_boxes}, timeout_s=60, before_play=started)
    assert result.eos and not result.errors, result.errors
    assert caps_seen and all(CUDA_MEMORY in c for c in caps_seen), caps_seen[:1]
    assert len(result.seen["gpu"]) == len(result.seen["sys"]) == 3
    for (gn, gb), (sn, sb) in zip(result.seen["gpu"], result.seen["sys"]):
        assert gn == sn == ["blue", "green", "red"]
        assert np.abs(gb - sb).max() <= 1, (gb, sb)


@needs_nvcodec
def test_pyinfer_in_flight_on_cuda_memory_gives_the_boxes_of_one_frame_at_a_time() -> None:
    """Three streams of nvh264dec frames with two frames each in the group at once: every frame leaves, in order,
    with the boxes of the in-flight=1 reference (the decoder's buffers are held a frame longer)."""
    streams = 3
    source = ("videotestsrc pattern=smpte num-buffers=12 ! video/x-raw,format=I420,width=640,height=360 ! "
              "x264enc speed-preset=ultrafast tune=zerolatency ! h264parse ! nvh264dec ! tee name=t ")
    branches = [f"t. ! queue ! pyinfer name=fl{k} device=cuda batch-group=cuda-fl batch-size={streams} "
                f"in-flight=2 {BLOBS} ! fakesink" for k in range(streams)]
    reference = f"t. ! queue ! pyinfer name=ref device=cuda batch-group=cuda-ref {BLOBS} ! fakesink"
    names = [f"fl{k}" for k in range(streams)] + ["ref"]
    result = run_pipeline(source + " ".join([*branches, reference]), dict.fromkeys(names, labelled_boxes),
                          timeout_s=60)
    assert result.eos and not result.errors, result.errors
    ref = result.seen["ref"]
    assert len(ref) == 12 and all(labels == ["blue", "green", "red"] for labels, _ in ref)
    for name in names[:-1]:
        assert len(result.seen[name]) == 12, name
        for (labels, boxes), (ref_labels, ref_boxes) in zip(result.seen[name], ref):
            assert labels == ref_labels and np.allclose(boxes, ref_boxes, atol=1e-3), name


@needs_nvcodec
def test_pyinfer_cuda_device_on_system_memory_still_works() -> None:
    desc = H264 + f"cudadownload ! video/x-raw,format=NV12 ! pyinfer name=dut device=cuda {BLOBS} ! fakesink"
    result = run_pipeline(desc, {"dut": labelled_boxes}, timeout_s=60)
    assert result.eos and not result.errors
    assert [names for names, _ in result.seen["dut"]] == [["blue", "green", "red"]] * 3


@needs_nvcodec
def test_pyinfer_foreign_cuda_context_is_a_clear_error() -> None:
    gi.require_version("GstCuda", "1.0")
    from gi.repository import GstCuda

    foreign = GstCuda.CudaContext.new(0)  # a context of its own, not torch's primary one
    desc = H264 + f"pyinfer name=dut device=cuda {BLOBS} ! fakesink"

    def give_foreign(pipeline: Gst.Pipeline) -> None:
        pipeline.set_context(GstCuda.context_new_cuda_context(foreign))

    result = run_pipeline(desc, timeout_s=60, before_play=give_foreign)
    assert result.errors, "a foreign CUDA context must not pass silently"
    assert "not torch's primary context" in result.errors[0] and "share_torch_context" in result.errors[0]


@needs_nvcodec
def test_pyinfer_cuda_error_during_inference_is_an_element_error(tmp_path: Path) -> None:
    factory = tmp_path / "cuda_failing.py"
    factory.write_text(textwrap.dedent("""
        import torch
        from blobs import ColorBlobDetector

        class Failing(ColorBlobDetector):
            calls = 0
            def forward(self, x):
                Failing.calls += 1
                if Failing.calls > 2:  # after the load-time probe and the warm-up
                    raise RuntimeError("CUDA error: an illegal memory access was encountered")
                return super().forward(x)

        def model():
            return Failing().eval()
    """))
    desc = H264 + (f"pyinfer name=dut device=cuda model={factory}:model model-family=yolo-end2end "
                   "labels=red,green,blue precision=fp32 ! fakesink")
    result = run_pipeline(desc, timeout_s=60)
    assert result.errors and "inference failed" in result.errors[0]
    assert "CUDA error: an illegal memory access was encountered" in result.errors[0]


# --- torch backend: CUDA graphs (backends/cuda_graphs.py) ------------------------------------------------------
def test_graph_buckets_are_powers_of_two_below_the_batch_and_the_batch() -> None:
    from inferstream.backends.cuda_graphs import graph_buckets

    assert graph_buckets(1) == [1]
    assert graph_buckets(8) == [1, 2, 4, 8]
    assert graph_buckets(12) == [1, 2, 4, 8, 12]
    with pytest.raises(ValueError, match="expected >= 1, got 0"):
        graph_buckets(0)


# replay times of yolo11s fp16 in channels_last on the H200 (ms per replay: 1 / 2 / 4 / 8 / 16 / 32 frames)
H200_MS = {1: 1.36, 2: 1.45, 4: 1.88, 8: 2.93, 16: 5.17, 32: 9.43}


def test_a_batch_runs_on_the_cheapest_cover_by_the_graphs_replay_times() -> None:
    from inferstream.backends.cuda_graphs import cheapest_cover

    assert cheapest_cover(32, H200_MS) == [32]
    assert cheapest_cover(24, H200_MS) == [16, 8]  # 8.15 ms against 9.43 for 32 padded by a third
    assert cheapest_cover(20, H200_MS) == [16, 4]
    assert cheapest_cover(28, H200_MS) == [32]  # 16 + 8 + 4 would take 10.08 ms
    assert cheapest_cover(5, H200_MS) == [8]  # 4 + 1 would take 3.29 ms
    assert cheapest_cover(24, {**H200_MS, 24: 7.4}) == [24]  # a graph of the exact size beats any split
    assert cheapest_cover(24, H200_MS, overhead=2.0) == [32]  # when a further replay costs more than it saves
    assert cheapest_cover(16, {8: 2.0, 16: 4.0}) == [16]  # a tie: the fewer replays
    assert cheapest_cover(3, {}) == []


def test_each_graph_of_a_cover_runs_its_own_rows_of_the_batch() -> None:
    from inferstream.backends.cuda_graphs import split_rows

    assert split_rows(24, [16, 8]) == [(16, 0, 16), (8, 16, 8)]
    assert split_rows(21, [16, 8]) == [(16, 0, 16), (8, 16, 5)]  # the last graph padded
    assert split_rows(7, [8]) == [(8, 0, 7)]
    assert split_rows(16, [16, 8]) == [(16, 0, 16)]  # nothing left for a second graph


def test_a_model_server_captures_every_sum_of_whole_requests_up_to_its_max_batch() -> None:
    from inferstream.backends.cuda_graphs import request_sums

    assert request_sums(8, 64) == [8, 16, 24, 32, 40, 48, 56, 64]  # three requests of 8 run 24, not 32 padded
    assert request_sums(8, 32) == [8, 16, 24, 32]
    assert request_sums(4, 64) == [8, 16, 24, 32, 40, 48, 56, 64]  # past 12 sizes: two requests a step
    assert request_sums(1, 32) == [3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 32]
    assert request_sums(40, 32) == [32]  # a request larger than max-batch runs alone, at its own size
    assert request_sums(6, 32) == [6, 12, 18, 24, 30, 32]
    with pytest.raises(ValueError, match="expected >= 1, got 0, 32"):
        request_sums(0, 32)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"graph": "sometimes"}, "graph='sometimes' is not one of auto, off, cuda-graph"),
    ({"graph": "cuda-graph", "device": "cpu"}, "graph=cuda-graph needs a CUDA device"),
])  # fmt: skip
def test_load_backend_rejects_bad_graph_options(kwargs: dict[str, str], match: str) -> None:
    from inferstream.backends.loader import load_backend
    from inferstream.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        load_backend("blobs:color_blob_detector", **kwargs)


def test_graph_auto_is_off_on_cpu() -> None:
    from inferstream.backends.loader import load_backend

    assert load_backend("blobs:color_blob_detector", graph="auto").graph_status == "off"


def _traced(tmp_path: Path) -> Path:
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.SiLU(), torch.nn.Conv2d(8, 6, 1),
                              torch.nn.Flatten(2)).eval()
    path = tmp_path / "tiny.torchscript"
    torch.jit.save(torch.jit.trace(net, torch.rand(1, 3, 64, 64)), str(path))
    return path


@needs_cuda
@pytest.mark.parametrize("batch", [1, 3, 4, 5])
def test_cuda_graph_replay_matches_eager_for_padded_batches(tmp_path: Path, batch: int) -> None:
    from inferstream.backends.loader import load_backend

    path = _traced(tmp_path)
    graphed = load_backend(str(path), device="cuda", precision="fp32", graph="cuda-graph")
    eager = load_backend(str(path), device="cuda", precision="fp32", graph="off")
    assert graphed.memory_format == eager.memory_format == torch.channels_last  # a conv net on CUDA
    reference = torch.jit.load(str(path)).eval()  # NCHW on the CPU: the layout must not change the numbers
    graphed.warmup(4, (64, 64))
    for seed in range(2):  # fresh inputs each time: a replay must see the new data
        x = torch.rand(batch, 3, 64, 64, generator=torch.Generator().manual_seed(seed))
        (g,), (e,) = graphed(x.cuda()), eager(x.cuda())
        assert g.shape == e.shape == (batch, 6, 961)
        torch.testing.assert_close(g, e, atol=1e-2, rtol=1e-2)  # TF32 convs may pick other algorithms per batch
        with torch.inference_mode():
            torch.testing.assert_close(g.cpu(), reference(x), atol=1e-2, rtol=1e-2)
    assert graphed.graph_status.startswith("cuda-graph")


@needs_cuda
def test_a_batch_split_over_two_graphs_gives_the_eager_outputs_of_every_frame(tmp_path: Path) -> None:
    """24 frames on graphs of 16 and 8 replayed one after the other (the cover their replay times make cheapest):
    each frame's outputs, in order, as eager gives them, in tensors the next call does not overwrite."""
    from inferstream.backends.loader import load_backend

    path = _traced(tmp_path)
    graphed = load_backend(str(path), device="cuda", precision="fp32", graph="cuda-graph")
    eager = load_backend(str(path), device="cuda", precision="fp32", graph="off")
    graphed.warmup(32, (64, 64))
    graphs = graphed._graphs  # the times of yolo11s on the H200, so that 16 + 8 is the cheapest cover of 24
    assert graphs is not None
    for (size, _, _), captured in graphs._graphs.items():
        captured.ms = H200_MS[size]
    graphs._plans.clear()
    x = torch.rand(24, 3, 64, 64, generator=torch.Generator().manual_seed(3)).cuda()
    (split,) = graphed(x)
    assert graphs._plans[24, 64, 64] == [16, 8]
    (again,) = graphed(x.flip(0))  # a second call: the first one's outputs stay as they were
    (e,) = eager(x)
    torch.testing.assert_close(split, e, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(again, e.flip(0), atol=1e-2, rtol=1e-2)


@needs_cuda
def test_cuda_graph_capture_failure_falls_back_in_auto_and_fails_when_asked(tmp_path: Path) -> None:
    from inferstream.backends.base import ModelInfo
    from inferstream.backends.torch_backend import TorchBackend
    from inferstream.errors import BackendInitError

    def syncs(x: torch.Tensor) -> torch.Tensor:  # .item() synchronises: not capturable
        return x * float(x.sum().item() > 0)

    dev = torch.device("cuda", torch.cuda.current_device())
    auto = TorchBackend(syncs, ModelInfo(), dev, torch.float32, graph="auto")
    auto.warmup(2, (8, 8))
    assert auto.graph_status.startswith("eager: capture failed")
    x = torch.rand(2, 3, 8, 8, device=dev)
    torch.testing.assert_close(auto(x)[0], x)
    strict = TorchBackend(syncs, ModelInfo(), dev, torch.float32, graph="cuda-graph")
    with pytest.raises(BackendInitError, match="CUDA graph capture failed for batch 1"):
        strict.warmup(2, (8, 8))
