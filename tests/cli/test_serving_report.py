"""The serving report's load section: TTFT/ITL against load and the layouts' Pareto front in
``txcalc report --inference --input-len I --output-len O`` (images next to report.md, linked
from it), and every plotted number equal to what ``txcalc plan infer --json`` answers for the
same flags (the independent path: the CLI, its option parsing and ``plan_serving``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from txcalc.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "reports" / "llama-3.1-70b-serve-h100-load"
runner = CliRunner()


def _rep() -> dict:
    return json.loads((EXAMPLE / "report.json").read_text())


def _plan_infer(d: dict, tp: int, pp: int, load: list[str]) -> dict:
    """``plan infer --json`` for one plotted point: the layout, one replica, the chunk."""
    argv = ["plan", "infer", d["model"], "--gpu", d["gpu"], "--input-len", str(d["input_len"]),
            "--output-len", str(d["output_len"]), "--tp", str(tp), "--pp", str(pp),
            "--replicas", "1", "--max-num-batched-tokens", str(d["max_num_batched_tokens"]),
            "--kv-dtype", d["kv_dtype"], "--precision", d["precision"], *load, "--json"]
    r = runner.invoke(app, argv)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_committed_serving_report_links_both_plots():
    md = (EXAMPLE / "report.md").read_text()
    rep = _rep()
    sec = next(s for s in rep["sections"] if s["id"] == "serving_load")
    assert [p["file"] for p in sec["plots"]] == ["serve_load.png", "serve_pareto.png"]
    for name in ("serve_load.png", "serve_pareto.png"):
        assert re.search(rf"!\[[^\]]+\]\({re.escape(name)}\)", md), name
        assert (EXAMPLE / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (EXAMPLE / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 5  # the two load plots are embedded too
    assert "## Latency against load, and the layouts' Pareto front" in md


def test_load_points_equal_plan_infer_json():
    d = _rep()["data"]["serving_load"]
    tp, pp = d["load"]["tp"], d["load"]["pp"]
    cap = _plan_infer(d, tp, pp, ["--rate", "inf"])
    assert cap["requests_per_s"] == d["load"]["capacity_requests_per_s"]
    pts = d["load"]["points"]
    assert len(pts) == 7
    for p in (pts[0], pts[3], pts[-1]):  # light, middle, past capacity
        a = _plan_infer(d, tp, pp, ["--rate", repr(p["rate"])])
        assert a["rate"] == p["rate"]
        for k in ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s"):
            assert a[k] == p[k], k
    # and the layout is the one plan infer picks for the report's concurrency
    best = runner.invoke(app, ["plan", "infer", d["model"], "--gpu", d["gpu"], "--input-len",
                               str(d["input_len"]), "--output-len", str(d["output_len"]),
                               "--concurrency", str(d["layout_from"]["concurrency"]),
                               "--precision", d["precision"], "--json"])
    assert best.exit_code == 0, best.output
    b = json.loads(best.output)
    assert (b["tp"], b["pp"], b["max_num_batched_tokens"]) == (tp, pp,
                                                               d["max_num_batched_tokens"])


def test_pareto_points_equal_plan_infer_json():
    d = _rep()["data"]["serving_load"]
    pts = d["pareto"]["points"]
    assert {p["tp"] for p in pts} == {2, 4, 8}  # tp 1 does not hold 70B bf16 on 80 GB
    for p in (pts[0], pts[-1]) + tuple(q for q in pts if q["pareto"])[:1]:
        a = _plan_infer(d, p["tp"], 1, ["--concurrency", str(p["concurrency"])])
        assert a["itl_p50_s"] == p["itl_p50_s"]
        assert a["output_tokens_per_s"] / a["total_gpus"] == p["tokens_per_s_per_gpu"]


def test_plots_draw_the_reported_numbers():
    """The figures' lines carry exactly the report.json numbers (what the PNG shows)."""
    pytest.importorskip("matplotlib")
    from txcalc.report import plots
    rep = _rep()
    d = rep["data"]["serving_load"]
    fig = plots._serve_load(rep)
    ttft, itl = fig.axes[0].lines, fig.axes[1].lines
    pts = d["load"]["points"]
    assert list(ttft[0].get_xdata()) == [p["rate"] for p in pts]
    assert list(ttft[0].get_ydata()) == [p["ttft_p50_s"] for p in pts]
    assert list(ttft[1].get_ydata()) == [p["ttft_p99_s"] for p in pts]
    assert list(itl[0].get_ydata()) == [p["itl_p50_s"] * 1e3 for p in pts]
    assert list(itl[1].get_ydata()) == [p["itl_p99_s"] * 1e3 for p in pts]
    fig = plots._serve_pareto(rep)
    front = sorted((p for p in d["pareto"]["points"] if p["pareto"]),
                   key=lambda p: p["itl_p50_s"])
    line = fig.axes[0].lines[-1]
    assert list(line.get_ydata()) == [p["tokens_per_s_per_gpu"] for p in front]
    # the front: no point has more tokens/s per GPU and a shorter ITL than a front point
    for p in front:
        assert not any(q["tokens_per_s_per_gpu"] > p["tokens_per_s_per_gpu"]
                       and q["itl_p50_s"] < p["itl_p50_s"] for q in d["pareto"]["points"])


def test_a_report_without_lengths_has_no_load_section():
    rep = json.loads((ROOT / "reports" / "llama-3.1-70b-serve-h200-128k" / "report.json")
                     .read_text())
    assert "serving_load" not in rep["data"] and "input_len" not in rep["data"]["request"]
    assert all(s["id"] != "serving_load" for s in rep["sections"])


@pytest.mark.parametrize("args, words", [
    (["--input-len", "5000"], "--output-len (0)"),
    (["--output-len", "500"], "--input-len (0)"),
    (["--input-len", "-3", "--output-len", "500"], "--input-len"),
    (["--input-len", "5k", "--output-len", "x"], "--output-len"),
])
def test_bad_lengths_exit_2_with_one_line(tmp_path, capsys, args, words):
    from tests.cli.test_files import one_line_error
    out = tmp_path / "r"
    one_line_error(capsys, ["report", "llama-3-8b", "--inference", "--gpu", "h100", *args,
                            "-o", str(out)], words)
    assert not out.exists()


def test_lengths_only_apply_to_serving_reports(tmp_path, capsys):
    from tests.cli.test_files import one_line_error
    one_line_error(capsys, ["report", "llama-3-8b", "--gpu", "h100", "--input-len", "100",
                            "--output-len", "10", "-o", str(tmp_path / "r")], "--inference")
