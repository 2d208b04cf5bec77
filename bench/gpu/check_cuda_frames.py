#!/usr/bin/env python3
"""GPU check of ``inferstream.frames.cuda``: CUDA buffers mapped zero-copy vs. the same frames via cudadownload.

Run on the GPU machine after provisioning (see bench/gpu/README.md):

    . /opt/gst/env.sh && python bench/gpu/check_cuda_frames.py [--frames 30] [--json out.json]

Cases (1280x720, videotestsrc smpte):
  nv12-cudaconvert   cudaupload ! cudaconvert ! NV12 CUDA memory     (context shared by a bus sync handler)
  rgba-cudaconvert   cudaupload ! cudaconvert ! RGBA CUDA memory     (bus sync handler)
  nv12-nvh264dec     nvh264enc ! h264parse ! nvh264dec ! NV12 CUDA   (pipeline.set_context)
  mismatch           nv12-cudaconvert without sharing: mapping must raise CudaContextMismatchError
Each frame is teed: the CUDA branch is mapped with mapped_cuda_frame and converted with ops.color.to_rgb on the
GPU; the other branch goes through cudadownload (planes compared byte for byte) and cudadownload ! videoconvert
! RGB (to_rgb's videoconvert parity on the GPU, reported only). Exit status 1 when the planes differ from
cudadownload's, or to_rgb on the GPU differs from to_rgb on the CPU.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstVideo", "1.0")
import torch
from gi.repository import Gst, GstVideo

from inferstream.frames import cuda
from inferstream.frames.cuda import mapped_cuda_frame
from inferstream.frames.cuda_context import CudaContextMismatchError, share_torch_context, torch_context_handle
from inferstream.frames.system import frame_format, mapped_frame
from inferstream.native import cuda as native_cuda
from inferstream.native.structs import GstCudaMemoryC, GstMapInfoC
from inferstream.ops.color import to_rgb

W, H = 1280, 720
SRC = f"videotestsrc num-buffers={{n}} pattern=smpte ! video/x-raw,width={W},height={H},format={{raw}}"
CASES = {
    "nv12-cudaconvert": (f"{SRC} ! cudaupload ! cudaconvert ! video/x-raw(memory:CUDAMemory),format=NV12", "I420",
                         "NV12", "bus"),
    "rgba-cudaconvert": (f"{SRC} ! cudaupload ! cudaconvert ! video/x-raw(memory:CUDAMemory),format=RGBA", "I420",
                         "RGBA", "bus"),
    # H100/H200 have NVDEC but no NVENC: x264enc makes the stream there
    "nv12-nvh264dec": (f"{SRC} ! {{enc}} ! h264parse ! nvh264dec ! video/x-raw(memory:CUDAMemory),format=NV12",
                       "I420", "NV12", "pipeline"),
}
TAIL = ("tee name=t t. ! queue ! appsink name=gpu sync=false "
        "t. ! queue ! cudadownload ! video/x-raw,format={fmt} ! tee name=c "
        "c. ! queue ! appsink name=cpu sync=false "
        "c. ! queue ! videoconvert ! video/x-raw,format=RGB ! appsink name=ref sync=false")


def _pull(sink: Gst.Element, pipeline: Gst.Pipeline) -> Gst.Sample:
    sample = sink.emit("try-pull-sample", 10 * Gst.SECOND)
    if sample is None:
        msg = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
        detail = f"{msg.parse_error()[0].message} / {msg.parse_error()[1]}" if msg else "timeout or EOS"
        raise RuntimeError(f"{sink.get_name()}: no sample ({detail})")
    return sample


def _info(sample: Gst.Sample) -> GstVideo.VideoInfo:
    return GstVideo.VideoInfo.new_from_caps(sample.get_caps())


def _maxdiff(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.to(torch.int16) - b.to(torch.int16)).abs().max().item())


def run_case(name: str, n: int, share: str | None) -> dict[str, object]:
    desc, raw, fmt, _ = CASES[name]
    enc = "nvh264enc" if Gst.ElementFactory.find("nvh264enc") else "x264enc speed-preset=ultrafast tune=zerolatency"
    pipeline = Gst.parse_launch(desc.format(n=n, raw=raw, enc=enc) + " ! " + TAIL.format(fmt=fmt))
    if share == "bus":
        share_torch_context(pipeline.get_bus())
    elif share == "pipeline":
        share_torch_context(pipeline)
    gpu, cpu, ref = (pipeline.get_by_name(s) for s in ("gpu", "cpu", "ref"))
    pipeline.set_state(Gst.State.PLAYING)
    res: dict[str, object] = {"case": name, "frames": 0}
    plane_diff = rgb_dev_diff = rgb_ref_diff = 0
    ref_err: list[torch.Tensor] = []
    map_us: list[float] = []
    conv_ms: list[float] = []
    try:
        for _ in range(n):
            sg, sc, sr = _pull(gpu, pipeline), _pull(cpu, pipeline), _pull(ref, pipeline)
            bg, bc, br = sg.get_buffer(), sc.get_buffer(), sr.get_buffer()
            if not (bg.pts == bc.pts == br.pts):
                raise RuntimeError(f"pts mismatch {bg.pts} {bc.pts} {br.pts}")
            if res["frames"] == 0:
                res["caps"] = sg.get_caps().to_string()
            t0 = time.perf_counter()
            with mapped_cuda_frame(bg, _info(sg)) as frame:
                map_us.append((time.perf_counter() - t0) * 1e6)
                if res["frames"] == 0:
                    res["plane_shapes"] = [list(p.shape) for p in frame.planes]
                    res["plane_strides"] = [list(p.stride()) for p in frame.planes]
                    res["plane_ptrs_offset"] = [p.data_ptr() - frame.planes[0].data_ptr() for p in frame.planes]
                    res["colorimetry"] = [frame.matrix, frame.full_range]
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                rgb_gpu = to_rgb(frame, "cuda").clone()
                e1.record()
                planes_gpu = [p.clone() for p in frame.planes]
            torch.cuda.synchronize()
            conv_ms.append(e0.elapsed_time(e1))
            with mapped_frame(bc, _info(sc)) as cframe:
                plane_diff = max(plane_diff, *(_maxdiff(g.cpu(), c) for g, c in zip(planes_gpu, cframe.planes)))
                rgb_dev_diff = max(rgb_dev_diff, _maxdiff(rgb_gpu.cpu(), to_rgb(cframe, "cpu")))
            with mapped_frame(br, _info(sr)) as rframe:
                rgb_ref_diff = max(rgb_ref_diff, _maxdiff(rgb_gpu.cpu(), rframe.planes[0]))
                ref_err.append((rgb_gpu.cpu().to(torch.int16) - rframe.planes[0].to(torch.int16)).abs().flatten())
            res["frames"] = int(res["frames"]) + 1
        res["profile_us"] = profile_map(sg)
    finally:
        pipeline.set_state(Gst.State.NULL)
    res.update(plane_maxdiff_vs_cudadownload=plane_diff, rgb_maxdiff_gpu_vs_cpu_to_rgb=rgb_dev_diff,
               rgb_maxdiff_vs_videoconvert=rgb_ref_diff,
               rgb_vs_videoconvert_mean=round(float(torch.cat(ref_err).float().mean()), 3),
               rgb_vs_videoconvert_frac_gt2=round(float((torch.cat(ref_err) > 2).float().mean()), 5),
               map_enter_us_median=round(statistics.median(map_us), 1),
               to_rgb_gpu_ms_median=round(statistics.median(conv_ms), 3))
    # videoconvert parity depends on ops.color and the caps' chroma siting: reported, not a failure of the mapping
    res["ok"] = plane_diff == 0 and rgb_dev_diff == 0
    return res


def _median_us(fn, reps: int = 200) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e6, 1)


def profile_map(sample: Gst.Sample) -> dict[str, object]:
    """Where mapped_cuda_frame' time goes, on one held sample (median µs of 200)."""
    buf, info = sample.get_buffer(), _info(sample)
    dev = torch.device("cuda", 0)
    nat = native_cuda.gst_cuda_calls()
    mem = cuda._cuda_memory(buf)
    stream = nat.cuda_gst.gst_cuda_stream_get_handle(nat.cuda_gst.gst_cuda_memory_get_stream(mem))
    mi = GstMapInfoC()
    flags = native_cuda.GST_MAP_READ | native_cuda.GST_MAP_CUDA

    def enter_exit() -> None:
        with mapped_cuda_frame(buf, info):
            pass

    def map_unmap() -> None:
        nat.gst.gst_memory_map(mem, ctypes.byref(mi), flags)
        nat.gst.gst_memory_unmap(mem, ctypes.byref(mi))

    out: dict[str, object] = {"gst_stream": "external" if stream else "default (NULL)"}
    out["enter_exit"] = _median_us(enter_exit)
    out["gst_memory_map_unmap"] = _median_us(map_unmap)
    nat.gst.gst_memory_map(mem, ctypes.byref(mi), flags)
    try:
        layout = cuda.plane_layouts(info.finfo.name, info.width, info.height, [1 << 16] * 3, [0] * 3)[0]
        cai = cuda.cuda_array_interface(mi.data, layout)
        out["as_tensor_one_plane"] = _median_us(lambda: torch.as_tensor(cuda.CudaArrayView(cai), device=dev))
        out["gst_stream_handle"] = _median_us(lambda: cuda._gst_stream_handle(mem))
        gs = cuda._gst_stream_handle(mem)
        consumer, ctx = torch.cuda.current_stream(dev).cuda_stream, torch_context_handle(dev.index)
        out["stream_wait"] = _median_us(lambda: native_cuda.stream_wait(consumer, gs, ctx))
        out["colorimetry_of"] = _median_us(lambda: cuda_colorimetry(info))
        ff = frame_format(info)  # what mapped_cuda_frame checks the memory's layout against
        out["memory_layout"] = _median_us(lambda: cuda._memory_layout(GstCudaMemoryC.from_address(mem), ff))
    finally:
        nat.gst.gst_memory_unmap(mem, ctypes.byref(mi))
    return out


def cuda_colorimetry(info: GstVideo.VideoInfo) -> tuple[str, bool]:
    from inferstream.frames.system import colorimetry_of

    return colorimetry_of(info)


def run_mismatch(n: int) -> dict[str, object]:
    try:
        run_case("nv12-cudaconvert", n, share=None)
    except CudaContextMismatchError as exc:
        return {"case": "mismatch", "ok": True, "raised": str(exc)[:160] + "..."}
    return {"case": "mismatch", "ok": False, "raised": None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    Gst.init(None)
    torch.cuda.init()
    print(f"GStreamer {Gst.version_string()}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    results = []
    for name, (_, _, _, share) in CASES.items():
        t = time.perf_counter()
        try:
            r = run_case(name, args.frames, share)
        except Exception as exc:  # noqa: BLE001
            r = {"case": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        r["wall_s"] = round(time.perf_counter() - t, 2)
        results.append(r)
        print(json.dumps(r))
    results.append(run_mismatch(3))
    print(json.dumps(results[-1]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    ok = all(r["ok"] for r in results)
    print("check_cuda_frames:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
