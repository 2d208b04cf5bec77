"""pyvlm in real pipelines with a real (tiny, random-weight) LLaVA: answers equal transformers' own greedy generate,
in-process and through a real OpenAI-compatible server; crops relate to their objects; the video never waits."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gst_helpers import inject, run_pipeline
from ports import free_port
from vlm_models import reference_answers

from inferstream.meta.vlm import AnswerMeta, read_answers
from vlm.vlm_servers import server_argv

W, H = 160, 120
SRC = f"videotestsrc num-buffers={{n}} pattern=ball ! video/x-raw,format=RGB,width={W},height={H},framerate=30/1"
PROMPT = "describe the image"


def _vtest(vtest: Path, n: int) -> str:
    return (f"filesrc location={vtest} ! decodebin ! videoconvert ! videoscale ! "
            f"video/x-raw,format=RGB,width={W},height={H} ! identity eos-after={n + 1}")


def _frame_and_answers(buf: Any) -> tuple[np.ndarray, list[AnswerMeta], int]:
    _ok, info = buf.map(1)  # Gst.MapFlags.READ
    frame = np.frombuffer(info.data, np.uint8).reshape(H, W, 3).copy()
    buf.unmap(info)
    return frame, read_answers(buf), buf.pts


def _run(desc: str, name: str = "v", probes: dict | None = None,
         props: dict | None = None) -> tuple[Any, list[tuple[np.ndarray, list[AnswerMeta], int]], dict]:
    """Play ``desc``; ``props`` are set on element ``name`` before PLAYING (values that quoting would mangle)."""
    stats: dict = {}

    def on_message(pipeline: Any, msg: Any) -> None:
        if msg.type in (msg.type.EOS, msg.type.ERROR):
            el = pipeline.get_by_name(name)
            stats.update(json.loads(el.get_property("stats")))

    def before_play(pipeline: Any) -> None:
        for key, value in (props or {}).items():
            pipeline.get_by_name(name).set_property(key, value)

    result = run_pipeline(desc, probes={name: _frame_and_answers, **(probes or {})}, timeout_s=60,
                          on_message=on_message, before_play=before_play)
    return result, result.seen.get(name, []), stats


def test_pyvlm_sync_answers_equal_generate_on_real_video(tiny_vlm: Path, vtest: Path) -> None:
    result, seen, stats = _run(f"{_vtest(vtest, 8)} ! pyvlm name=v model={tiny_vlm} prompt=\"{PROMPT}\" interval=3 "
                               "sync=true max-new-tokens=6 batch-size=2 ! fakesink")
    assert result.errors == [] and result.eos
    asked = [i for i, (_, answers, _) in enumerate(seen) if answers]
    assert asked == [0, 3, 6]
    expected = reference_answers(tiny_vlm, [seen[i][0] for i in asked], PROMPT, 6)
    got = [seen[i][1][0] for i in asked]
    assert [a.text for a in got] == expected and all(expected)
    assert [a.frame for a in got] == asked and [a.pts_ns for a in got] == [seen[i][2] for i in asked]
    assert [a.od_id for a in got] == [-1, -1, -1]
    messages = [s for s in result.elements if s.get_name() == "inferstream-vlm-answer"]
    assert [m.get_value("text") for m in messages] == expected
    assert stats["requested"] == stats["answered"] == stats["attached"] == 3 and stats["dropped"] == 0


def test_pyvlm_openai_backend_through_transformers_serve_equals_generate(tiny_vlm: Path, start_server: Any) -> None:
    port = free_port()
    url = start_server([str(Path(sys.executable).with_name("transformers")), "serve", str(tiny_vlm), "--port",
                        str(port), "--host", "127.0.0.1", "--device", "cpu"], port)
    result, seen, stats = _run(f"{SRC.format(n=6)} ! pyvlm name=v backend=openai server-url={url} model={tiny_vlm} "
                               f"prompt=\"{PROMPT}\" interval=2 sync=true image-format=png max-new-tokens=6 "
                               "! fakesink")
    assert result.errors == [] and result.warnings == []
    asked = [i for i, (_, answers, _) in enumerate(seen) if answers]
    assert asked == [0, 2, 4]
    expected = reference_answers(tiny_vlm, [seen[i][0] for i in asked], PROMPT, 6)
    assert [seen[i][1][0].text for i in asked] == expected and all(expected)
    assert stats["answered"] == 3


def _two_objects(buf: Any, index: int) -> None:
    """A person (track 7) and a car on every frame, written as pyinfer + pytracker would (producer 1)."""
    import torch

    from inferstream.detections import Detections
    from inferstream.meta.gstanalytics import label_quarks, producer_quark, write_detections
    from inferstream.meta.tracks import TrackRecord, write_tracks

    dets = Detections(boxes_xyxy=torch.tensor([[10.0, 20.0, 74.0, 100.0], [90.0, 30.0, 150.0, 70.0]]),
                      scores=torch.tensor([0.9, 0.8]), labels=torch.tensor([0, 1]))
    ids = write_detections(buf, dets, label_quarks(["person", "car"]), producer_quark(1))
    write_tracks(buf, [TrackRecord(ids[0], 7, 0, buf.pts, False)])


def test_pyvlm_crops_one_answer_per_object_related_to_it(tiny_vlm: Path) -> None:
    inject("dets", _two_objects)
    result, seen, stats = _run(f"{SRC.format(n=4)} ! testinject name=dets ! pyvlm name=v model={tiny_vlm} "
                               f"mode=objects operate-on-unique-id=1 interval=2 sync=true prompt=\"what is this ?\" "
                               "max-new-tokens=5 ! fakesink")
    assert result.errors == []
    per_frame = [answers for _, answers, _ in seen]
    assert [len(a) for a in per_frame] == [2, 0, 2, 0]
    crops = []
    for i in (0, 2):
        person, car = per_frame[i]
        assert (person.label, person.track_id, person.box_xywh, person.od_id) == ("person", 7, (10, 20, 64, 80), 0)
        assert (car.label, car.track_id, car.box_xywh) == ("car", -1, (90, 30, 60, 40))
        assert car.od_id not in (-1, person.od_id)
        frame = seen[i][0]
        crops += [frame[20:100, 10:74], frame[30:70, 90:150]]
    expected = reference_answers(tiny_vlm, crops, "what is this ?", 5)
    assert [a.text for i in (0, 2) for a in per_frame[i]] == expected

    inject("dets", _two_objects)  # classes + one question per track, async: the answer relates to a later frame's box
    result, seen, stats = _run(f"{SRC.format(n=40)} ! testinject name=dets ! pyvlm name=v model={tiny_vlm} "
                               "mode=objects classes=person new-tracks-only=true max-new-tokens=3 ! "
                               "identity sleep-time=5000 ! fakesink")
    answers = [(i, a) for i, (_, found, _) in enumerate(seen) for a in found]
    assert stats["requested"] == 1 and len(answers) == 1
    carried_on, answer = answers[0]
    assert (answer.frame, answer.track_id, answer.label) == (0, 7, "person") and carried_on > 0
    assert answer.od_id == 0  # the person's ODMtd on the buffer that carries the answer


def test_pyvlm_async_slow_server_never_stalls_the_video(tiny_vlm: Path, start_server: Any) -> None:
    port = free_port()
    url = start_server(server_argv(port, "slow", str(tiny_vlm), "0.5"), port)
    live = f"videotestsrc is-live=true num-buffers=60 ! video/x-raw,format=RGB,width={W},height={H},framerate=30/1"
    stamps: list[float] = []
    run_pipeline(f"{live} ! identity name=v ! fakesink sync=true",
                 probes={"v": lambda _buf: stamps.append(time.monotonic())}, timeout_s=30)
    plain_span, plain_gap = stamps[-1] - stamps[0], max(np.diff(stamps))
    stamps.clear()
    result, seen, stats = _run(f"{live} ! pyvlm name=v backend=openai server-url={url} model=tiny interval=1 "
                               "queue-size=2 concurrency=1 drain-timeout=3 ! identity name=out ! fakesink sync=true",
                               probes={"out": lambda _buf: stamps.append(time.monotonic())})
    assert result.errors == [] and len(seen) == 60 and len(stamps) == 60
    # 0.5 s per answer, yet the frames keep their pace: the span and the longest gap stay those of the run without
    # the element (one frame waiting for one answer would add 0.5 s; margins for a busy 2-core CI machine)
    assert abs((stamps[-1] - stamps[0]) - plain_span) < 0.25 and max(np.diff(stamps)) < max(plain_gap + 0.05, 0.25)
    assert stats["requested"] == 60 and stats["dropped"] > 40
    assert stats["answered"] + stats["dropped"] + stats["failed"] + stats["pending"] == 60
    assert stats["answered"] >= 1 and any("not answered" in w for w in result.warnings)
    assert len([w for w in result.warnings if "dropped a request" in w]) == 1
    carried = [(i, a) for i, (_, found, _) in enumerate(seen) for a in found]
    assert carried and all(a.frame < i for i, a in carried)  # each rides on a later buffer, with its own pts
    assert all(a.pts_ns == seen[a.frame][2] for _, a in carried)


def test_pyvlm_clip_mode_sends_several_frames_per_request(tiny_vlm: Path) -> None:
    result, seen, stats = _run(f"{SRC.format(n=7)} ! pyvlm name=v model={tiny_vlm} mode=clip clip-length=3 "
                               f"clip-stride=2 interval=100 sync=true prompt=\"{PROMPT}\" max-new-tokens=5 ! fakesink")
    assert result.errors == []
    asked = [i for i, (_, answers, _) in enumerate(seen) if answers]
    assert asked == [4] and stats["requested"] == 1  # frames 0, 2, 4; the next clip waits for interval
    expected = reference_answers(tiny_vlm, [[seen[0][0], seen[2][0], seen[4][0]]], PROMPT, 5)
    assert seen[4][1][0].text == expected[0] and seen[4][1][0].frame == 4


def test_pyvlm_stream_prompts_override_the_prompt_per_stream(tiny_vlm: Path) -> None:
    prompts = json.dumps({"cam2": "what is this ?"})
    texts = {}
    for sid in ("cam1", "cam2"):
        _, seen, _ = _run(f"{SRC.format(n=1)} ! pyvlm name=v model={tiny_vlm} stream-id={sid} sync=true "
                          f"prompt=\"{PROMPT}\" max-new-tokens=5 ! fakesink", props={"stream-prompts": prompts})
        texts[sid] = (seen[0][1][0].text, seen[0][0])
    assert texts["cam1"][0] == reference_answers(tiny_vlm, [texts["cam1"][1]], PROMPT, 5)[0]
    assert texts["cam2"][0] == reference_answers(tiny_vlm, [texts["cam2"][1]], "what is this ?", 5)[0]


@pytest.mark.parametrize(("props", "kind"), [
    ({"prompt": "{nope} here"}, "failed-prompt"),
    ({"max-image-pixels": 100}, "failed-image"),
    ({"json-schema": '{"type": "object"}'}, "failed-json"),  # the random model's words are no JSON
])
def test_pyvlm_bad_request_warns_and_the_video_goes_on(tiny_vlm: Path, props: dict, kind: str) -> None:
    result, seen, stats = _run(f"{SRC.format(n=6)} ! pyvlm name=v model={tiny_vlm} interval=2 sync=true "
                               "! fakesink", props=props)
    assert result.errors == [] and result.eos and len(seen) == 6
    assert stats[kind] == 3 and stats["answered"] == 0
    assert len([w for w in result.warnings if "request failed" in w]) == 1  # first of its kind; the rest counted
    assert any("some requests were not answered" in w for w in result.warnings)


@pytest.mark.parametrize("mode", ["garbage", "nochoices", "down"])
def test_pyvlm_server_down_or_garbage_warns_and_counts(mode: str, start_server: Any) -> None:
    port = free_port()
    if mode != "down":
        start_server(server_argv(port, mode), port)
    result, seen, stats = _run(f"{SRC.format(n=4)} ! pyvlm name=v backend=openai "
                               f"server-url=http://127.0.0.1:{port}/v1 model=m interval=1 sync=true retries=1 "
                               "timeout=2 ! fakesink")
    assert result.errors == [] and len(seen) == 4
    kind = "server" if mode == "down" else "garbage"
    assert stats[f"failed-{kind}"] == 4
    assert any(f"({kind};" in w for w in result.warnings)


def test_pyvlm_folder_that_is_not_a_vlm_warns_and_passes_video(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    result, seen, stats = _run(f"{SRC.format(n=3)} ! pyvlm name=v model={tmp_path} ! fakesink")
    assert result.errors == [] and result.eos and len(seen) == 3
    assert any("pyvlm disabled" in w and str(tmp_path) in w for w in result.warnings)
    assert "not a vision-language model" in stats["disabled"]


def test_pyvlm_missing_model_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    result, seen, _ = _run(f"{SRC.format(n=3)} ! pyvlm name=v model={missing} ! fakesink")
    assert len(result.errors) == 1 and str(missing) in result.errors[0] and seen == []


def test_pyvlm_answers_reach_pymsgconv_payloads_and_pyosd(tiny_vlm: Path) -> None:
    from inferstream.meta.payload import read_payloads

    def payloads(buf: Any) -> list[dict]:
        return [json.loads(p) for m in read_payloads(buf) for p in m.payloads]

    result = run_pipeline(f"{SRC.format(n=4)} ! pyvlm name=v model={tiny_vlm} interval=2 sync=true max-new-tokens=4 "
                          "! pymsgconv name=conv frame-interval=1000 stream-id=cam7 ! tee name=t ! queue ! pyosd name=osd "
                          "! fakesink t. ! queue ! fakesink",
                          probes={"v": _frame_and_answers, "conv": payloads, "osd": _frame_and_answers}, timeout_s=60)
    assert result.errors == []
    answers = [a for _, found, _ in result.seen["v"] for a in found]
    docs = [d for found in result.seen["conv"] for d in found if d["schema"] == "inferstream.vlm-answer/1"]
    assert [(d["text"], d["frame"], d["pts_ns"], d["object"]) for d in docs] == \
        [(a.text, a.frame, a.pts_ns, None) for a in answers] and len(docs) == 2
    # pyosd draws the stream's latest answer top left, also on frames without a new one (white text on black)
    for (before, _, _), (after, _, _) in zip(result.seen["v"], result.seen["osd"]):
        corner_before, corner_after = before[:18, :60], after[:18, :60]
        assert (corner_after != corner_before).any() and set(np.unique(corner_after)) <= {0, 255}


def test_pyvlm_failing_chat_template_warns_and_counts(tiny_vlm: Path, tmp_path: Path) -> None:
    import shutil

    broken = shutil.copytree(tiny_vlm, tmp_path / "broken-template")
    (broken / "chat_template.jinja").write_text("{{ raise_exception('no images allowed') }}")
    result, seen, stats = _run(f"{SRC.format(n=4)} ! pyvlm name=v model={broken} interval=2 sync=true ! fakesink")
    assert result.errors == [] and len(seen) == 4 and stats["failed-prompt"] == 2
    assert any("chat template failed" in w and "no images allowed" in w for w in result.warnings)


def test_pyvlm_streams_share_one_model_and_batch_together(tiny_vlm: Path) -> None:
    from inferstream.vlm import service

    shared: list[int] = []
    vlm = f"model={tiny_vlm} interval=1 batch-size=4 queue-size=16 max-new-tokens=3 drain-timeout=30"
    desc = " ".join(f"videotestsrc num-buffers=3 pattern={p} ! video/x-raw,format=RGB,width={W},height={H} ! "
                    f"pyvlm name={n} {vlm} stream-id={n} ! fakesink" for n, p in (("a", "ball"), ("b", "snow")))
    result = run_pipeline(desc, probes={n: _frame_and_answers for n in "ab"}, timeout_s=60,
                          on_start=lambda _p: shared.append(len(service._SERVICES)))
    assert result.errors == [] and shared == [1]  # one service (one model, one queue) for both streams
    messages = [(m.get_value("stream-id"), m.get_value("frame"), m.get_value("text")) for m in result.elements
                if m.get_name() == "inferstream-vlm-answer"]
    assert sorted((s, f) for s, f, _ in messages) == [(s, f) for s in "ab" for f in range(3)]
    frames = [result.seen[s][f][0] for s, f, _ in messages]
    assert [t for _, _, t in messages] == reference_answers(tiny_vlm, frames, "Describe the image.", 3)
