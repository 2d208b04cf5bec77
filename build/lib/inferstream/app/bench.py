"""``inferstream bench``: run each script in bench/ (each prints a markdown table) and print the tables."""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def default_bench_dir() -> Path:
    import inferstream

    repo = Path(inferstream.__file__).resolve().parents[2] / "bench"  # editable install: the repository's bench/
    return repo if repo.is_dir() else Path.cwd() / "bench"


def bench(bench_dir: Path | None = None, out: Path | None = None, only: str | None = None,
          script_args: Sequence[str] = ()) -> int:
    """Run ``bench_dir/*.py`` in name order; prints (and with ``out`` writes) the collected markdown."""
    folder = bench_dir or default_bench_dir()
    scripts = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_") and (not only or only in p.stem))
    if not scripts:
        print(f"no benchmark scripts in {folder}", file=sys.stderr)
        return 1
    sections, failed = ["# Benchmarks\n"], 0
    for script in scripts:
        print(f"running {script.name} ...", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, str(script), *script_args], capture_output=True, text=True, check=False)
        took = time.monotonic() - t0
        if done.returncode != 0:
            failed += 1
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            sections.append(f"## {script.stem}\n\nfailed (exit {done.returncode}):\n\n```\n{tail}\n```\n")
            continue
        sections.append(f"## {script.stem}\n\n{done.stdout.strip()}\n\n_{took:.0f} s_\n")
    text = "\n".join(sections)
    print(text)
    if out is not None:
        out.write_text(text)
    return 1 if failed else 0
