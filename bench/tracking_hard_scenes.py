"""IDF1 and id switches of pytracker's ByteTrack and the tracking libraries on issue 15's hard scenes, per scene.

    python bench/tracking_hard_scenes.py [--seeds 0 1 2] [--label "this tree"] [--out FILE]

The scenes, libraries and scoring of tests/tracking/test_hard_scenes.py (bouncing boxes: crossings, occlusion
drops, misses, jitter, false positives; motmetrics at IoU 0.5), printed as a table instead of asserted. Run it
with another checkout's ``src`` first on PYTHONPATH to score that code's ByteTrack on the same scenes.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.tracking.libraries import score_all
from tests.tracking.scenes import BOUNCE_SUITE, make_bounce_scene


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--label", default="this tree", help="named in the table's title")
    ap.add_argument("--out", type=Path, help="append the table to this markdown file")
    args = ap.parse_args()
    rows, names = [], None
    for scene_name, cfg in BOUNCE_SUITE.items():
        for seed in args.seeds:
            scores = score_all(make_bounce_scene(seed, cfg))
            names = names or list(scores)
            rows.append((f"{scene_name} / {seed}", scores))
            print(rows[-1][0], {k: f"{v.idf1:.3f}/{v.id_switches}" for k, v in scores.items()}, file=sys.stderr)
    assert names is not None
    lines = [f"### {args.label}: IDF1 / id switches", "", "| scene / seed | " + " | ".join(names) + " |",
             "|---" * (len(names) + 1) + "|"]
    lines += [f"| {r} | " + " | ".join(f"{s[n].idf1:.3f} / {s[n].id_switches}" for n in names) + " |" for r, s in rows]
    lines.append("| **mean IDF1 / total switches** | " + " | ".join(
        f"**{statistics.fmean(s[n].idf1 for _, s in rows):.3f} / {sum(s[n].id_switches for _, s in rows)}**"
        for n in names) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        with args.out.open("a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
