"""Terminal output at 80, 120 and 200 columns (issue 18 item 5): no line wider than the
terminal, no number or layout name cut, wide tables folded to key-value blocks, pinned plans
saying what was pinned."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from txcalc.cli import main
from txcalc.cli.narrow import pack

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = (80, 120, 200)
#: a number broken over two lines: a digit ends one line, its continuation starts with one
CUT_NUMBER = re.compile(r"\d[,.]?\n {4,}\d")  # continuation lines: 4 spaces


def _run(argv, width):
    env = dict(os.environ, COLUMNS=str(width), PYTHONPATH=str(ROOT), TERM="dumb")
    env.pop("NO_COLOR", None)
    r = subprocess.run([sys.executable, "-m", "txcalc", *argv], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _in_process(capsys, monkeypatch, argv, width):
    from txcalc.cli.output import console
    monkeypatch.setattr(console, "_width", width)
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def _readable(text, width):
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width, \
        max(lines, key=lambda line: len(line.rstrip()))
    assert not CUT_NUMBER.search(text), CUT_NUMBER.search(text).group()
    assert "…" not in text  # rich's ellipsis: a truncated cell


PLAN = ["plan", "train", "llama-3.1-405b", "--tokens", "15T", "--gpu", "h100", "--days", "90",
        "--price", "2.5"]


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_train_at_width(width, capsys):
    text = _run(PLAN, width)
    _readable(text, width)
    capsys.readouterr()
    assert main([*PLAN, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    for row in plan["layouts"]:  # every layout name and figure whole, on one line
        assert row["layout_name"] in text
        assert f"{row['gpu_hours']:,.0f}" in text
    assert f"{plan['tokens']:,}" in text
    folded = width < 100
    assert ("┃ layout" in text) is not folded
    if folded:  # key-value view: the layout on its own line, then "column: value" pairs
        assert f"\n{plan['layouts'][0]['layout_name']}\n" in text and "GPU-hours: " in text


CMDS = [
    ["plan", "infer", "llama-3.1-70b", "--gpu", "h200", "--context", "128k", "--concurrency",
     "64", "--kv-dtype", "fp8"],
    ["plan", "infer", "llama-3.1-70b", "--gpu", "h100", "--input-len", "2000",
     "--output-len", "200", "--rate", "2", "--ttft-p99", "2s", "--price", "2.5", "--tp", "4"],
    ["params", "llama-3.1-70b"], ["presets"],
    ["flops", "llama-3-8b", "--context", "131072"],
    ["memory", "llama-3.1-8b", "--finetune", "qlora", "--seq", "4096"],
    ["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--seq", "4096"],
    ["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpus", "64", "--tp", "2"],
]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("argv", CMDS, ids=lambda a: " ".join(a[:3]))
def test_commands_at_width(capsys, monkeypatch, argv, width):
    _readable(_in_process(capsys, monkeypatch, argv, width), width)


def test_presets_names_whole_at_80(capsys, monkeypatch):
    from txcalc.model.presets import PRESETS
    text = _in_process(capsys, monkeypatch, ["presets"], 80)
    assert all(name in text for name in PRESETS)


def test_pinned_plan_says_what_was_pinned(capsys, monkeypatch):
    text = _in_process(capsys, monkeypatch, ["plan", "train", "llama-3-8b", "--tokens", "1T",
                                             "--gpus", "64"], 120)
    assert "fewest GPUs on which training fits" not in text
    assert "GPUs pinned by --gpus: 64" in text
    text = _in_process(capsys, monkeypatch, ["plan", "train", "llama-3-8b", "--tokens", "1T",
                                             "--gpus", "64", "--tp", "2", "--zero", "1"], 120)
    assert "pinned (the search kept only these): --tp 2, --zero 1" in text
    text = _in_process(capsys, monkeypatch, ["plan", "train", "llama-3-8b", "--tokens", "1T",
                                             "--tp", "2"], 120)
    assert "fewest GPUs on which training fits with the pins below: " in text


def test_pack_breaks_only_between_phrases():
    phrases = ["81.3 days", "31,985,492 GPU-hours", "cost 79,963,731", "MFU 32.7%"]
    lines = pack(phrases, 30, "    ", "  best: ")
    assert all(len(line) <= 30 for line in lines)
    assert " ".join(" ".join(lines).split()) == "best: " + ", ".join(phrases)
    assert pack(["x" * 50], 20) == ["x" * 50]  # a phrase longer than the line is never cut


@pytest.mark.parametrize("width", [80, 120])
def test_command_list_wraps_each_summary_to_the_width(width):
    """``txcalc --help`` lists each command with the first paragraph of its help wrapped to
    the terminal, not broken where the docstring's source lines break: no description line
    ends while the next line's first word would still have fit on it."""
    out = _run(["--help"], width)
    panel = out[out.index("Commands"):]
    rows = [line[1:-1] for line in panel.splitlines() if line.startswith("│")]
    assert len(rows) >= 10
    indent = re.match(r" \S+\s+", rows[0]).end()  # where the descriptions start
    for a, b in zip(rows, rows[1:]):
        if b[:indent].strip():  # b starts the next command
            continue
        free = len(a) - len(a.rstrip()) - 1  # columns left on line a, less the panel's padding
        nxt = b.strip().split(" ", 1)[0]
        assert 1 + len(nxt) > free, (a, b)  # a space and the word would not have fit
