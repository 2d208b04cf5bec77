"""inferstream bench runs each bench script and prints the tables they print."""
from __future__ import annotations

from pathlib import Path

import pytest

from inferstream.app.cli import main


def test_bench_prints_each_scripts_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "alpha.py").write_text("import sys\nprint('| a | b |\\n|---|---|\\n| 1 | %s |' % sys.argv[1:])\n")
    (tmp_path / "beta.py").write_text("print('| c |\\n|---|\\n| 2 |')\n")
    (tmp_path / "_helper.py").write_text("raise SystemExit(3)\n")
    out = tmp_path / "BENCHMARKS.md"
    assert main(["bench", "--dir", str(tmp_path), "--out", str(out), "--", "--quick"]) == 0
    text = capsys.readouterr().out
    assert "## alpha" in text and "| 1 | ['--quick'] |" in text and "## beta" in text and "| 2 |" in text
    assert "_helper" not in text and out.read_text().strip() == text.strip()


def test_bench_reports_a_failing_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('no data')\n")
    assert main(["bench", "--dir", str(tmp_path)]) == 1
    assert "failed (exit 1)" in capsys.readouterr().out
