"""Counters, FPS, progress/ETA and the Prometheus text endpoint."""
from __future__ import annotations

import time
import urllib.request

import pytest

from inferstream.app.metrics import MetricsServer, StreamCounters, render_prometheus, snapshot


def test_stream_counters_progress_from_frames_then_duration() -> None:
    c = StreamCounters("a", total_frames=10)
    for _ in range(4):
        c.on_frame(0)
    assert c.progress() == pytest.approx(0.4)
    d = StreamCounters("b")
    d.duration_ns, d.last_pts_ns = 10_000_000_000, 2_500_000_000
    assert d.progress() == pytest.approx(0.25)
    assert StreamCounters("live", live=True).progress() is None
    d.finish("done")
    assert d.progress() == 1.0 and d.eta_s(time.monotonic()) is None


def test_stream_counters_eta_extrapolates_elapsed_time() -> None:
    c = StreamCounters("a", total_frames=100)
    c.on_frame(0)
    c.first_frame_at = time.monotonic() - 10.0
    c.frames = 25
    assert c.eta_s(time.monotonic()) == pytest.approx(30.0, abs=0.5)


def test_stream_counters_fps_is_windowed_then_averaged() -> None:
    c = StreamCounters("a")
    now = time.monotonic()
    c.first_frame_at, c.frames = now - 4.0, 40
    c.fps(now - 1.0)  # a sample one second ago with 40 frames ...
    c.frames = 60  # ... then 20 frames in that second
    assert c.fps(now) == pytest.approx(20.0, rel=0.01)
    c.finish("done")
    c.ended_at = now
    assert c.fps(now) == pytest.approx(15.0)  # 60 frames over 4 s


def test_render_prometheus_has_per_stream_and_batch_series() -> None:
    a, b = StreamCounters("cam1", total_frames=10), StreamCounters('we"ird')
    a.frames, a.late, a.dropped = 5, 2, 1
    b.finish("failed", "boom")
    text = render_prometheus(snapshot([a, b], {"batches": 3, "mean-fill": 1.5}, time.monotonic()))
    assert 'inferstream_frames_total{stream="cam1"} 5' in text
    assert 'inferstream_late_frames_total{stream="cam1"} 2' in text
    assert 'inferstream_dropped_frames_total{stream="cam1"} 1' in text
    assert 'inferstream_stream_failed{stream="we\\"ird"} 1' in text
    assert 'inferstream_stream_progress_ratio{stream="cam1"} 0.5' in text
    assert "inferstream_batch_fill_mean 1.5" in text and "inferstream_batches_total 3" in text
    assert "# TYPE inferstream_frames_total counter" in text


def test_counters_past_a_million_keep_every_digit() -> None:
    from inferstream.app.metrics import metric_lines

    lines = metric_lines("x_total", "counter", "h", [("", 1_234_567), ('{a="b"}', 9_876_543.25), ("", 0.5)])
    assert lines[2:] == ["inferstream_x_total 1234567", 'inferstream_x_total{a="b"} 9876543.25',
                         "inferstream_x_total 0.5"]


def test_metrics_server_serves_latest_snapshot_on_localhost() -> None:
    server = MetricsServer(0)
    try:
        c = StreamCounters("cam1")
        c.frames = 7
        server.publish(snapshot([c], {}, time.monotonic()))
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as reply:
            assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert 'inferstream_frames_total{stream="cam1"} 7' in reply.read().decode()
    finally:
        server.close()
