"""What the CLI prints around its answer: nothing stray (issue 18)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_report_on_a_pipe_prints_its_answer_and_nothing_else(tmp_path):
    """``txcalc report`` without ``--json`` on a pipe: the title, the headline answer (the
    report's first paragraph, issue 29) and the files written, no empty line first (rich's
    Progress ends with one on a console that is not a terminal, where its transient bar
    shows nothing anyway)."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "r"
    r = subprocess.run([sys.executable, "-m", "txcalc", "report", "gpt2", "--seq", "128",
                        "-o", str(out)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200"))
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Capacity report: training gpt2", r.stdout
    answer = (out / "report.md").read_text().split("## The answer", 1)[1].strip()
    assert " ".join(lines[1:-1]) == " ".join(answer.split("\n\n")[0].replace("**", "").split())
    assert re.fullmatch(rf"  wrote {re.escape(str(out))}/: report.md, report.html, "
                        r"report.json and \d+ plots?", lines[-1]), r.stdout


def test_validate_on_a_pipe_starts_with_its_table(tmp_path, capsys):
    """``txcalc validate`` without ``--json`` on a non-terminal stdout: no empty line before
    its first table (the same rich Progress ending as ``report``'s)."""
    pytest.importorskip("torch")
    from txcalc.cli import main

    capsys.readouterr()
    assert main(["validate", "gpt2", "--seq", "16", "--kv-tokens", "0", "--out",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.strip() and not out.startswith("\n") and "\n\n" not in out[:200], out[:300]


@pytest.mark.parametrize("columns", ["80", "200"])
def test_plan_train_band_line_reads_as_a_list(columns, capsys, monkeypatch):
    """The README's answer (plan train with --price): the band's items are one comma list,
    wrapped at any width without a comma opening a line or a space before a comma (the cost
    item used to carry its own leading comma: 'MFU 41.0%-50.6%\\n    , cost ...')."""
    from txcalc.cli import main

    monkeypatch.setenv("COLUMNS", columns)
    capsys.readouterr()
    assert main(["plan", "train", "llama-3.1-405b", "--tokens", "15T", "--gpu", "h100",
                 "--days", "90", "--price", "2.5"]) == 0
    out = capsys.readouterr().out
    # the headline's first line carries the GPU, not "MODEL on" alone (its phrase breaks
    # between words)
    assert out.splitlines()[0].startswith("llama-3.1-405b on h100-sxm (each"), out[:200]
    band = out[out.index("  band ("):out.index("  note:")]
    assert " ," not in band and not re.search(r"^\s*,", band, re.M), band
    assert re.search(r"MFU [\d.]+%-[\d.]+%,\s+cost [\d,]+-[\d,]+\s*$", band), band
