"""Comparing the CUDA path's detections with the CPU path's, and the results as a markdown report."""
from __future__ import annotations

from typing import Any


def compare_detections(gpu: dict[int, Any], cpu: dict[int, Any]) -> dict[str, Any]:
    """Per frame (by pts): same count, and every detection matched (same label, box edges within 1 px after
    rounding to whole pixels, score within 1e-3), greedily by score; also counted within 4 px and 1e-2. The
    first detections left unmatched at 1 px / 1e-3 are listed with their nearest CPU detection (``unmatched``): the
    per-frame files do not come back from the device machine, this does."""
    strict = _match(gpu, cpu, box_px=1.0, score=1e-3)
    loose = _match(gpu, cpu, box_px=4.0, score=1e-2)
    strict["matched_within_4px_1e-2"] = loose["matched"]
    # the fast CUDA preprocessing is a few levels off the exact path: judge it at 4 px / 1e-2 (90 % of detections)
    strict["ok_within_4px"] = bool(strict["detections"]) and loose["matched"] >= 0.9 * strict["detections"]
    return strict


def _match(gpu: dict[int, Any], cpu: dict[int, Any], box_px: float, score: float) -> dict[str, Any]:
    import torch

    frames = sorted(set(gpu) & set(cpu))
    matched = total = count_mismatch = 0
    max_box = max_score = 0.0
    unmatched: list[dict[str, Any]] = []
    for pts in frames:
        g, c = gpu[pts], cpu[pts]
        ng, nc = (len(g) if g is not None else 0), (len(c) if c is not None else 0)
        total += max(ng, nc)
        if ng != nc:
            count_mismatch += 1
        if not ng or not nc:
            continue
        used = torch.zeros(nc, dtype=torch.bool)
        for i in torch.argsort(g.scores, descending=True).tolist():
            d = (g.boxes_xyxy[i] - c.boxes_xyxy).abs().amax(dim=1)
            d[used | (c.labels != g.labels[i])] = float("inf")
            j = int(torch.argmin(d))
            if float(d[j]) <= box_px and abs(float(g.scores[i] - c.scores[j])) <= score:
                used[j] = True
                matched += 1
                max_box = max(max_box, float(d[j]))
                max_score = max(max_score, abs(float(g.scores[i] - c.scores[j])))
            elif len(unmatched) < UNMATCHED_LISTED:
                unmatched.append({"frame": pts, "gpu": _row(g, i), "cpu_nearest": None if d[j] == float("inf")
                                  else _row(c, j)})
    return {"frames_compared": len(frames), "frames_gpu": len(gpu), "frames_cpu": len(cpu),
            "detections": total, "matched": matched, "frames_with_count_mismatch": count_mismatch,
            "max_box_diff_px": round(max_box, 3), "max_score_diff": round(max_score, 6),
            "dets_per_frame": round(total / max(len(frames), 1), 1),
            "ok": bool(frames) and len(frames) == len(gpu) == len(cpu) and matched >= 0.99 * total and total > 0,
            "unmatched": unmatched}


UNMATCHED_LISTED = 8


def _row(dets: Any, i: int) -> list[float]:
    """A detection as [label, x1, y1, x2, y2, score]."""
    return [int(dets.labels[i]), *(round(float(v), 2) for v in dets.boxes_xyxy[i]), round(float(dets.scores[i]), 5)]


def _tracker_text(tracker: bool | str) -> str:
    """Results before track-in-batch record a bool."""
    return tracker if isinstance(tracker, str) else ("yes" if tracker else "no")


def markdown(results: dict[str, Any]) -> str:
    ph = results["phases"]
    env, ceil, pipes = ph.get("env", {}), ph.get("ceiling", {}), ph.get("pipelines", {})
    lines = [(f"Run {results['started']}: {env.get('gpu', env.get('torch_device', 'CPU dry run'))}, driver "
             f"{env.get('driver', '-')}, GStreamer {env.get('gstreamer', '?')}, torch {env.get('torch', '?')} "
             f"(CUDA {env.get('cuda_runtime', '-')}), Python {env.get('python', '?')}"), ""]
    lines += [("| streams | batch | memory into pyinfer | pytracker | frames/s | ceiling at batch (img/s) | ratio | "
              "GPU util | NVDEC util | host CPU (cores) | GIL wait p90 (ms) | mean fill |"),
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in pipes.items():
        if "streams" not in r:
            lines.append(f"| {key} | | | | {r.get('skipped', r.get('error', '?'))} | | | | | | | |")
            continue
        c = ceil.get(f"b{r['batch']}", {}).get("img_s")
        negotiated = "CUDA memory" if "CUDAMemory" in str(r.get("caps")) else "system memory"
        memory = negotiated + (" (cudadownload)" if "download" in key else "")
        fps = r.get("fps")
        ratio = f"{100 * fps / c:.0f} %" if fps and c else "-"
        fill = r.get("batch_stats", {}).get("mean-fill", "-")
        fps_text = (f"{fps}" + (" (partial: timed out)" if r.get("partial") else "")) if fps else r.get("error", "-")
        lines.append(f"| {r['streams']} | {r['batch']} | {memory} | {_tracker_text(r.get('tracker', True))} | "
                     f"{fps_text} | "
                     f"{c or '-'} | {ratio} | {r.get('gpu_util_pct', '-')} % | {r.get('nvdec_util_pct', '-')} % | "
                     f"{r.get('cpu_cores', '-')} | {r.get('gil_wait_ms_p90', '-')} | {fill} |")
    lines.append("")
    if ceil:
        lines.append("Ceilings (img/s): " + ", ".join(
            f"{k} {v.get('img_s')}" + (f" ({v.get('graph', '')[:10]})" if k.startswith("b") else "")
            for k, v in ceil.items() if isinstance(v, dict) and "img_s" in v)
            + f"; detector = Detector.infer on decoded frames already on the device, "
              f"{ceil.get('detector', {}).get('dets_per_frame', '?')} detections/frame")
    if (dec := ph.get("decode")) and isinstance(dec, dict):
        lines.append("NVDEC alone (nvh264dec ! fakesink, incl. start-up): " + ", ".join(
            f"{k} {v.get('fps_incl_startup')} frames/s" for k, v in dec.items() if isinstance(v, dict)))
    if (chk := ph.get("correctness")) and isinstance(chk, dict):
        lines.append(f"Correctness (CUDA path vs CPU path, fp32, {chk.get('model')} on {chk.get('clip')}): "
                     f"ok (1 px, 1e-3)={chk.get('ok')}, ok (4 px, 1e-2)={chk.get('ok_within_4px')}, "
                     f"{chk.get('matched')}/"
                     f"{chk.get('detections')} detections matched over {chk.get('frames_compared')} frames, max box "
                     f"diff {chk.get('max_box_diff_px')} px, max score diff {chk.get('max_score_diff')}; "
                     f"{chk.get('matched_within_4px_1e-2')} within 4 px / 1e-2; model inputs max abs diff "
                     f"{chk.get('input_max_abs_diff')} over {chk.get('inputs_compared')} frames; raw output rel. "
                     f"err {chk.get('model_output_rel_err')}"
                     + (f", error: {chk['error']}" if chk.get("error") else ""))
        if isinstance(ex := chk.get("preprocess_exact_on_gpu"), dict):
            lines.append(f"Correctness with preprocess=exact on the GPU: ok={ex.get('ok')}, {ex.get('matched')}/"
                         f"{ex.get('detections')} matched (1 px, 1e-3), {ex.get('matched_within_4px_1e-2')} within "
                         f"4 px / 1e-2, max box diff {ex.get('max_box_diff_px')} px")
    if (byt := ph.get("bytes")) and isinstance(byt, dict):
        lines.append("Host<->device bytes per frame (torch profiler / CUPTI): " + "; ".join(
            f"{k}: {v.get('bytes_per_frame')} in {v.get('copies_per_frame')} copies" for k, v in byt.items()
            if isinstance(v, dict)))
    if (dp := ph.get("detector_profile")) and isinstance(dp, dict) and dp.get("stages"):
        lines += ["", (f"Detector.infer alone at batch {dp.get('batch')}: {dp.get('img_s')} img/s "
                  f"({dp.get('timed_img_s')} with the stage timers' device syncs), {dp.get('dets_per_frame')} "
                  "detections/frame"), "", "| Detector stage (device-synchronised) | calls | ms/call |",
                  "|---|---|---|"]
        lines += [f"| {k} | {v['calls']} | {v['ms_per_call']} |" for k, v in dp["stages"].items()]
    if (prof := ph.get("profile")) and isinstance(prof, dict):
        lines += ["", "| profile run | frames/s | GPU util | GIL wait p90 (ms) | host CPU | mean fill |",
                  "|---|---|---|---|---|---|"]
        for k, v in prof.items():
            lines.append(f"| {k} | {v.get('fps', v.get('skipped', v.get('error', '-')))} | "
                         f"{v.get('gpu_util_pct', '-')} % | {v.get('gil_wait_ms_p90', '-')} | "
                         f"{v.get('cpu_cores', '-')} | "
                         f"{v.get('batch_stats', {}).get('mean-fill', '-')} |")
        stages = next((v.get("stages") for v in prof.values() if isinstance(v, dict) and v.get("stages")), None)
        if stages:
            lines += ["", "| stage (timed run, device-synchronised) | calls | ms/call | µs/frame | share of wall |",
                      "|---|---|---|---|---|"]
            lines += [f"| {k} | {v['calls']} | {v['ms_per_call']} | {v['us_per_frame']} | {v['share_of_wall']} |"
                      for k, v in stages.items()]
    return "\n".join(lines) + "\n"
