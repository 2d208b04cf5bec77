"""Where the GIL goes: summarise a ``py-spy record --gil -f raw`` profile by function.

    py-spy record --gil -r 500 -f raw -o prof.txt -- python bench/host_overhead_cpu.py --streams 32
    python bench/gil_profile.py prof.txt [--top 40] [--focus do_transform_ip]

With ``--gil`` py-spy samples only the thread holding the GIL, so the shares below are shares of the one resource
every streaming thread, batch and tracker of a pipeline competes for (``bench/results/gpu.md``). Prints, per
function (file and name, lines merged), the share of samples it is on the stack of (inclusive) and at the top of
(self), as markdown tables. ``--focus`` keeps only the stacks through a given function: py-spy's GIL detection is
not exact with many threads (the main thread, blocked in GStreamer's bus, is sampled as if it held the GIL), so
the element's own stacks are the ones to read.
"""
from __future__ import annotations

import argparse
import collections
from pathlib import Path


def summarise(raw: Path, focus: str = "") -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """(samples, inclusive counts, self counts) per ``function (file)`` from py-spy's raw (collapsed) output,
    over the stacks that contain ``focus``."""
    total = 0
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit() or focus not in stack:
            continue
        n = int(count)
        total += n
        frames = [_function(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for name in set(frames):
            inclusive[name] += n
    return total, inclusive, own


def _function(frame: str) -> str:
    """``name (path/file.py:123)`` -> ``name (file.py)``: lines of one function merged."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.split(':')[0]).name})" if where else name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("raw", type=Path)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--focus", default="", help="keep only stacks containing this text, e.g. do_transform_ip")
    args = ap.parse_args()
    total, inclusive, own = summarise(args.raw, args.focus)
    print(f"{total} samples holding the GIL" + (f", through {args.focus}" if args.focus else "") + "\n")
    for title, counts in (("inclusive", inclusive), ("self", own)):
        print(f"| function | {title} |\n|---|---|")
        for name, n in counts.most_common(args.top):
            print(f"| `{name}` | {100 * n / max(total, 1):.1f} % |")
        print()


if __name__ == "__main__":
    main()
