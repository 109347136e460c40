"""The report's launch section (issue 31): the files that run the plan's best layout, the same
as ``txcalc plan train --emit FORMAT`` writes for the same question, parsed back by TOML, and
a one-line refusal for a framework that cannot express the plan."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from txcalc.emit import FORMATS

REPORT = Path(__file__).parents[2] / "reports" / "llama-3.1-405b-train-h100"
ASK = ["llama-3.1-405b", "--gpu", "h100", "--tokens", "15.6T", "--seq", "8192", "--days", "100"]


def _body(text: str) -> str:
    """A file without its first header line (the command that wrote it differs)."""
    return text.split("\n", 1)[1]


@pytest.fixture(scope="module")
def launch():
    rep = json.loads((REPORT / "report.json").read_text())
    return rep["data"]["plan"], {e["format"]: e for e in rep["data"]["plan"]["launch"]}


def test_every_training_format_has_a_file_or_a_one_line_refusal(launch):
    _, by_format = launch
    assert set(by_format) == {f for f, (c, _, _) in FORMATS.items() if c == "plan train"}
    for fmt, e in by_format.items():
        if "refused" in e:
            assert e["refused"].startswith(f"--emit {fmt}: ") and "\n" not in e["refused"]
        else:
            assert e["main"] in e["files"]
    assert any("files" in e for e in by_format.values())


def test_the_torchtitan_file_is_the_plans_layout_and_what_plan_train_emits(launch):
    plan, by_format = launch
    e = by_format["torchtitan"]
    text = e["files"][e["main"]]
    job = tomllib.loads(text)
    best = plan["best"]["layout"]  # e.g. 'tp4 pp1 dp3072 z3 sp mb1 opsac'
    words = {w[:2]: w[2:] for w in best.split() if w[:2] in ("tp", "pp", "dp")}
    par = job["parallelism"]
    assert par["tensor_parallel_degree"] == int(words["tp"])
    assert par["pipeline_parallel_degree"] == int(words["pp"])
    assert (par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"]
            == int(words["dp"]))
    assert job["training"]["global_batch_size"] == plan["global_batch"]
    assert job["training"]["seq_len"] == plan["seq"]
    # the same question asked of plan train: the same file, header line aside
    r = subprocess.run([sys.executable, "-m", "txcalc", "plan", "train", *ASK, "--emit",
                        "torchtitan"], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert _body(r.stdout) == _body(text)


def test_the_markdown_shows_the_files(launch):
    _, by_format = launch
    md = (REPORT / "report.md").read_text()
    assert "## Launch: the files that run this plan" in md
    for fmt, e in by_format.items():
        for name, text in e.get("files", {}).items():
            assert f"*{fmt}: {name}*" in md and text.rstrip("\n") in md
