"""Capacity reports: committed examples equal a fresh run, numbers against independent
references, escaping of untrusted strings, HTML structure and rendering in headless Chromium,
atomic writes and bad input."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from txcalc.cli import main
from txcalc.report import ReportRequest, build_report
from txcalc.report.writer import write_report
from txcalc.units import gib  # memory is shown in GiB (issue 29)

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"


def _regenerator():
    """reports/regenerate.py (a script outside the package), loaded as a module."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("regenerate", REPORTS / "regenerate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


EXAMPLES = _regenerator().EXAMPLES
DATA = Path(__file__).parents[1] / "data" / "hf"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """Every example regenerated once for the module, exactly as `python
    reports/regenerate.py` does from the repository root (same relative -o paths, the same
    reports/validation/), into a scratch tree, by its own ``regenerate``."""
    root = tmp_path_factory.mktemp("examples")
    (root / "reports").mkdir()
    if (REPORTS / "validation").is_dir():
        (root / "reports" / "validation").symlink_to(REPORTS / "validation")
    old = os.getcwd()
    os.chdir(root)
    try:
        written = _regenerator().regenerate(Path("."))
        assert sorted(p.name for p in written) == sorted(EXAMPLES)
    finally:
        os.chdir(old)
    return root / "reports"


# --- committed examples equal what the command writes today ----------------------------------
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_committed_example_equals_a_fresh_run(examples, name):
    committed = REPORTS / name
    assert committed.is_dir(), f"reports/{name} missing: run python reports/regenerate.py"
    new = json.loads((examples / name / "report.json").read_text())
    old = json.loads((committed / "report.json").read_text())
    stale = f"reports/{name} is stale: regenerate with python reports/regenerate.py"
    assert new["data"] == old["data"], stale  # every number, exactly
    assert new == old, stale  # and every line of text
    assert (examples / name / "report.md").read_text() == (committed / "report.md").read_text()
    plots = sorted(p.name for p in committed.glob("*.png"))
    assert plots == sorted(p.name for p in (examples / name).glob("*.png"))
    assert plots == sorted(p["file"] for s in new["sections"] for p in s["plots"])


@pytest.mark.parametrize("name", ["llama-3.1-70b-serve-h200-128k", "t5-base-finetune-1gpu",
                                  "80b-why-distributed"])
def test_the_recorded_command_reproduces_the_report(name, tmp_path, monkeypatch):
    """The command printed at the end of a report (canonical options: --context 128k is
    recorded as 131072) makes the same report again."""
    import shlex

    old = json.loads((REPORTS / name / "report.json").read_text())
    argv = shlex.split(old["command"])
    assert argv[:2] == ["txcalc", "report"] and argv[-2:] == ["-o", f"reports/{name}"]
    (tmp_path / "reports").mkdir()
    if (REPORTS / "validation").is_dir():
        (tmp_path / "reports" / "validation").symlink_to(REPORTS / "validation")
    monkeypatch.chdir(tmp_path)
    assert main(argv[1:]) == 0
    new = json.loads((tmp_path / "reports" / name / "report.json").read_text())
    assert new["data"] == old["data"] and new["command"] == old["command"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_committed_markdown_shows_the_numbers(name):
    rep = json.loads((REPORTS / name / "report.json").read_text())
    md = (REPORTS / name / "report.md").read_text()
    d = rep["data"]
    assert f"{d['params']['total']:,}" in md
    assert gib(d["answer"]["total_bytes"]) in md
    ans = d["answer"]
    if ans["planner"]:  # the planner's answer, first thing in the report
        first = md.split("## ")[1]
        assert f"{ans['total_gpus']:,} {d['plan']['gpu']} GPU" in first
        if "days" in ans:
            assert f"for {ans['days']:,.1f} days" in first
            assert f"**{ans['min_gpus_to_fit']:,} GPU" in first
        else:
            assert f"**{ans['max_concurrency']:,} sequences**" in first
    elif not ans["fits_one_gpu"]:
        assert f"**{ans['min_gpus_by_memory']:,}" in md
    for m in d["memory"]:
        assert gib(m["total"]) in md
    if "activations_vs_seq" in d:
        a = d["activations_vs_seq"]
        for mode in ("none", "selective", "full"):
            assert all(gib(v) in md for v in a[mode])
    if d.get("kv_cache"):
        assert f"{d['kv_cache']['bytes_per_token']:,} bytes per token" in md
    for comp in d.get("components", []):
        assert f"| {comp['component']} | {comp['params']:,} |" in md
    assert rep["command"] in md and f"txcalc {rep['txcalc_version']}" in md


def test_pngs_are_deterministic(examples):
    """Fixed size and DPI, no Software or tIME chunk: the same matplotlib writes the same
    bytes (PNG bytes are not compared with the committed ones: another matplotlib or FreeType
    may rasterise text differently; the numbers are compared above)."""
    from txcalc.report import plots

    for name in EXAMPLES:
        for png in (examples / name).glob("*.png"):
            data = png.read_bytes()
            assert data[:8] == PNG_MAGIC
            assert b"tIME" not in data and b"Software" not in data
    rep = build_report(ReportRequest("t5-base", seq=512, batch=4))
    for spec in plots.plot_specs(rep):
        assert plots.draw(rep, spec) == plots.draw(rep, spec)


def test_helper_processes_draw_the_same_bytes_as_this_process(monkeypatch):
    """write_report draws in a helper process and its fork (plots.Painter): their PNGs equal
    the ones drawn here, in the order of the specs, each announced once; a helper that dies
    leaves its plots to this process, with the same bytes and the same announcements."""
    from txcalc.report import plots

    rep = build_report(ReportRequest("t5-base", seq=512, batch=4))
    specs = plots.plot_specs(rep)
    here = [plots.draw(rep, spec) for spec in specs]
    local = plots.draw_each

    def only_helpers(report, rest):  # the working helpers leave nothing to this process
        assert not rest, "drawn here, not by the helpers"
        return local(report, rest)
    for helper, fallback in ((plots._HELPER, only_helpers),
                             ("import sys; sys.stdin.buffer.read(); sys.exit(3)", local)):
        monkeypatch.setattr(plots, "_HELPER", helper)
        monkeypatch.setattr(plots, "draw_each", fallback)
        seen = []
        with plots.Painter() as painter:
            assert painter.proc is not None and len(painter.streams) == 2
            got = painter.draw_all(rep, specs, before=lambda spec: seen.append(spec["file"]))
        assert painter.proc is None and painter.streams == []
        assert got == here
        assert seen == [spec["file"] for spec in specs]


# --- the numbers against independent references ----------------------------------------------
def test_chapter_80b_example():
    # The chapter, section 8.8: an 80B model in fp16 mixed precision with Adam needs 160 GB of
    # weights + 160 GB of gradients + 960 GB of optimizer state: over 1 TB, more than any
    # single 80 GB GPU; training must be distributed.
    rep = json.loads((REPORTS / "80b-why-distributed" / "report.json").read_text())
    cats = rep["data"]["memory"][0]["categories"]
    assert (cats["weights"], cats["gradients"], cats["optimizer"]) == (160 * 10**9,
                                                                       160 * 10**9,
                                                                       960 * 10**9)
    assert rep["data"]["answer"]["fits_one_gpu"] is False
    assert rep["data"]["answer"]["min_gpus_by_memory"] == 16  # 1,280 GB / 80 GB
    md = (REPORTS / "80b-why-distributed" / "report.md").read_text()
    # in GiB (2^30, issue 29): 160e9, 960e9 and 1,280e9 bytes
    assert "149.01 GiB" in md and "894.07 GiB" in md and "1,192.09 GiB" in md
    assert "does NOT fit" in md and "must be distributed" in md


@pytest.mark.parametrize("name", sorted(n for n in EXAMPLES if not n.startswith("80b")))
def test_example_params_equal_the_hf_model_on_meta(name):
    from ..hf_models import hf_model, numel

    rep = json.loads((REPORTS / name / "report.json").read_text())
    model = rep["data"]["model"]["name"]
    raw = json.loads((DATA / f"{model}.json").read_text())
    assert rep["data"]["params"]["total"] == numel(hf_model(raw))
    assert sum(c["params"] for c in rep["data"]["components"]) == rep["data"]["params"]["total"]


def test_t5_finetune_step_flops_equal_flopcountermode():
    from ..hf_models import train_step_flops

    rep = json.loads((REPORTS / "t5-base-finetune-1gpu" / "report.json").read_text())
    fl, req = rep["data"]["flops"], rep["data"]["request"]
    assert req["attn"] == "eager"  # what HF's T5 runs, and what FlopCounterMode sees on meta
    raw = json.loads((DATA / "t5-base.json").read_text())
    assert fl["forward"] + fl["backward"] == train_step_flops(raw, req["batch"], req["seq"])


def test_llama_405b_training_compute_matches_the_paper():
    # Llama 3 (arXiv:2407.21783), section 3.2.1: the 405B flagship was pre-trained with
    # 3.8e25 FLOPs on 15.6T tokens (their 6ND estimate; ours adds the 8k-token attention).
    rep = json.loads((REPORTS / "llama-3.1-405b-train-h100" / "report.json").read_text())
    fl = rep["data"]["flops"]
    assert fl["train_tokens"] == 15_600_000_000_000
    assert fl["train_model_flops"] == pytest.approx(3.8e25, rel=0.05)
    assert fl["train_executed_flops"] > fl["train_model_flops"]  # causal half not skipped


def test_llama_70b_serving_kv_matches_the_published_table():
    # Hugging Face blog "Llama 3.1 - 405B, 70B & 8B" (2024-07-23), KV-cache table: 128,000
    # tokens of 70B in fp16 take 39.06 GB (the blog divides by 2**30).
    rep = json.loads((REPORTS / "llama-3.1-70b-serve-h200-128k" / "report.json").read_text())
    kv = rep["data"]["kv_cache"]
    assert round(kv["bytes_per_token"] * 128000 / 2**30, 2) == 39.06
    assert kv["bytes_per_sequence"] == kv["bytes_per_token"] * 131072
    assert kv["bytes_at_request"] == 16 * kv["bytes_per_sequence"]
    fl, comps = rep["data"]["flops"], rep["data"]["components"]
    assert sum(c["prefill_flops"] for c in comps) == fl["prefill_per_sequence"]
    assert sum(c["decode_flops"] for c in comps) == fl["decode_per_token"]
    ans = rep["data"]["answer"]
    weights = rep["data"]["weights_bytes"]
    n = ans["min_gpus_by_memory"]
    assert (n - 1) * ans["gpu_bytes"] < weights + kv["bytes_at_request"] <= n * ans["gpu_bytes"]
    assert ans["max_concurrency_on_min_gpus"] >= 16


def test_report_numbers_equal_the_memory_and_flops_commands(capsys):
    """The report and `txcalc memory/flops --json` read one engine: same request, same bytes."""
    rep = build_report(ReportRequest("llama-3-8b", seq=2048, batch=2, attn="eager",
                                     recompute="selective"))
    assert main(["memory", "llama-3-8b", "--seq", "2048", "--batch", "2", "--recompute",
                 "selective", "--attn", "eager", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    chosen = next(m for m in rep["data"]["single_gpu"] if m["recompute"] == "selective")
    assert chosen["total"] == mem["total_bytes"] == rep["data"]["answer"]["total_bytes"]
    # categories at the peak of the step (here the optimizer step: activations are freed)
    assert chosen["categories"]["activations"] == mem["peak_by_category"]["act"]
    assert chosen["categories"]["temporaries"] == mem["peak_by_category"]["temp"]
    assert main(["flops", "llama-3-8b", "--seq", "2048", "--batch", "2", "--attn", "eager",
                 "--json"]) == 0
    fl = json.loads(capsys.readouterr().out)
    assert rep["data"]["flops"]["model"] == fl["model_flops"]


def test_report_copies_the_planner_answers_exactly(capsys):
    """Training and serving answers equal `txcalc plan train/infer --json` for the same
    question (the planner is tested against published figures in test_planner.py)."""
    rep = json.loads((REPORTS / "mixtral-8x7b-train-h100" / "report.json").read_text())
    assert main(["plan", "train", "mixtral-8x7b", "--gpu", "h100", "--tokens", "1T", "--seq",
                 "4096", "--price", "2.5", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    ans = rep["data"]["answer"]
    assert ans["total_gpus"] == plan["total_gpus"]
    assert ans["min_gpus_to_fit"] == plan["min_gpus_to_fit"]
    assert ans["days"] == pytest.approx(plan["days"], rel=1e-5)
    assert ans["gpu_hours"] == pytest.approx(plan["gpu_hours"], rel=1e-5)
    assert ans["cost"] == pytest.approx(2.5 * plan["gpu_hours"], rel=1e-5)
    assert rep["data"]["plan"]["best"]["layout"] == plan["best"]["layout_name"]
    assert rep["data"]["memory"][0]["categories"] == plan["best"]["memory_bytes"]
    comm = {c["group"]: c for c in rep["data"]["plan"]["communication"]}
    assert set(comm) == set(plan["best"]["communication"])
    for group, c in plan["best"]["communication"].items():
        assert comm[group]["bytes_per_step"] == int(c["bytes_per_step"])
        assert comm[group]["exposed_s"] == pytest.approx(c["exposed_s"], rel=1e-5)

    serve = json.loads((REPORTS / "llama-3.1-70b-serve-h200-128k" / "report.json").read_text())
    assert main(["plan", "infer", "llama-3.1-70b", "--gpu", "h200", "--context", "128k",
                 "--concurrency", "16", "--json"]) == 0
    inf = json.loads(capsys.readouterr().out)
    ans = serve["data"]["answer"]
    assert (ans["total_gpus"], ans["replicas"], ans["max_concurrency"]) == (
        inf["total_gpus"], inf["replicas"], inf["max_concurrency"])
    assert ans["prefill_latency_s"] == pytest.approx(inf["prefill_latency_s"], rel=1e-5)
    # the frontier: more GPUs never train slower, and the chosen layout is on it
    front = rep["data"]["plan"]["frontier"]
    assert [f["gpus"] for f in front] == sorted(f["gpus"] for f in front)
    assert all(a["days"] >= b["days"] for a, b in zip(front, front[1:]))
    assert rep["data"]["plan"]["best"]["gpus"] in [f["gpus"] for f in front]


# --- untrusted strings are escaped --------------------------------------------------------------
EVIL = "<script>alert(1)</script>"


def _evil_config(tmp_path: Path) -> Path:
    raw = json.loads((DATA / "gpt2.json").read_text())
    raw["_name_or_path"] = EVIL + "\n# not a heading | nor a cell"
    p = tmp_path / "config.json"
    p.write_text(json.dumps(raw))
    return p


def _evil_gpu_file(tmp_path: Path) -> Path:
    from importlib import resources
    text = resources.files("txcalc").joinpath("data/gpus.csv").read_text()
    header, h100 = text.splitlines()[0], next(ln for ln in text.splitlines()
                                              if ln.startswith("h100-sxm,"))
    row = h100.split(",")
    row[0], row[1] = EVIL.replace(",", ""), ""
    p = tmp_path / "gpus.csv"
    p.write_text(header + "\n" + ",".join(row) + "\n")
    return p


def _outside_fences(md: str) -> str:
    """Markdown less its fenced code blocks (the launch section's files, shown verbatim:
    CommonMark renders a fenced block's content as text, so a name there is not markup; the
    fence is longer than any run of backticks inside, render.to_markdown)."""
    out, fence = [], None
    for line in md.split("\n"):
        if fence is None:
            if line.startswith("```"):
                fence = line
            else:
                out.append(line)
        elif line == fence:
            fence = None
    return "\n".join(out)


def test_model_and_gpu_names_from_files_are_escaped(tmp_path):
    out = tmp_path / "r"
    assert main(["report", str(_evil_config(tmp_path)), "--seq", "512", "--gpu", EVIL,
                 "--gpu-file", str(_evil_gpu_file(tmp_path)), "--tokens", "1B", "--max-gpus",
                 "8", "-o", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") > 5  # title, answer, tables
    assert "<script" not in page.lower()
    md = _outside_fences((out / "report.md").read_text())
    assert EVIL not in md and "&lt;script&gt;" in md
    assert "\n# not a heading" not in md and "&lt;/script&gt; # not a heading | nor" in md
    from txcalc.report.render import _md_cell
    assert _md_cell("a | b\nc") == "a \\| b c"  # a cell cannot split a table row
    data = json.loads((out / "report.json").read_text())["data"]
    assert data["model"]["name"].startswith(EVIL) and data["plan"]["gpu"] == EVIL


# --- HTML structure -------------------------------------------------------------------------------
class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unbalanced </{tag}>")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_html_structure(name):
    folder = REPORTS / name
    text = (folder / "report.html").read_text()
    rep = json.loads((folder / "report.json").read_text())
    assert text.startswith("<!DOCTYPE html>")
    page = _Page()
    page.feed(text)
    assert not page.errors and not page.stack
    metas = [a for t, a in page.tags if t == "meta"]
    assert any(a.get("http-equiv") == "Content-Security-Policy"
               and "default-src 'none'" in a["content"] for a in metas)
    # self-contained: no script, no external resource of any kind
    assert not [t for t, _ in page.tags if t in ("script", "link", "iframe", "object")]
    for _, attrs in page.tags:
        for key in ("src", "href"):
            assert not attrs.get(key) or attrs[key].startswith("data:image/png;base64,")
    # one section per report section, in order; the answer first
    ids = [a["id"] for t, a in page.tags if t == "section"]
    assert ids == [s["id"] for s in rep["sections"]] and ids[0] == "answer"
    # one <img> per plot, carrying exactly the PNG written next to the report
    imgs = [a for t, a in page.tags if t == "img"]
    specs = [p for s in rep["sections"] for p in s["plots"]]
    assert [a["data-file"] for a in imgs] == [p["file"] for p in specs]
    for a in imgs:
        png = base64.b64decode(a["src"].split(",", 1)[1], validate=True)
        assert png == (folder / a["data-file"]).read_bytes()
        assert (int(a["width"]), int(a["height"])) == (900, 500) and a["alt"]
    assert len([t for t, _ in page.tags if t == "table"]) == sum(len(s["tables"])
                                                                 for s in rep["sections"])


def test_sections_come_in_the_documented_order():
    rep = json.loads((REPORTS / "llama-3.1-405b-train-h100" / "report.json").read_text())
    assert [s["id"] for s in rep["sections"]] == [
        "answer", "components", "memory", "activations", "kv", "frontier", "launch",
        "validation", "assumptions", "provenance"]
    serve = json.loads((REPORTS / "llama-3.1-70b-serve-h200-128k" / "report.json").read_text())
    assert [s["id"] for s in serve["sections"]][:3] == ["answer", "components", "memory"]
    bullets = " ".join(b for s in rep["sections"] for b in s["bullets"])
    for convention in ("10^9 bytes", "2 FLOPs", "Executed FLOPs", "model FLOPs"):
        assert convention in bullets


# --- headless Chromium: the page renders and every plot decodes ------------------------------------
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--allow-file-access-from-files", "--virtual-time-budget=10000"]
# The report forbids scripts (CSP), so a separate page loads it in a frame and reads it.
CHECK = """<!DOCTYPE html><html><body><pre id="result">pending</pre>
<iframe id="f" src="%s" style="width:1100px;height:900px"></iframe>
<script>
document.getElementById("f").addEventListener("load", function () {
  var d = this.contentDocument, out = [];
  var r = document.getElementById("result");
  if (!d) { r.textContent = "NOACCESS"; return; }
  var imgs = d.querySelectorAll("img");
  for (var i = 0; i < imgs.length; i++) {
    var b = imgs[i].getBoundingClientRect();
    out.push({file: imgs[i].dataset.file, complete: imgs[i].complete,
              w: imgs[i].naturalWidth, h: imgs[i].naturalHeight, shown: b.width * b.height});
  }
  r.textContent = "RESULT" + JSON.stringify({title: d.title, sections:
                  d.querySelectorAll("section").length, imgs: out}) + "END";
});
</script></body></html>"""


def chromium_images(report_html: Path, tmp_path: Path) -> dict:
    check = tmp_path / "check.html"
    check.write_text(CHECK % report_html.resolve().as_uri())
    r = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                        "--dump-dom", check.as_uri()], capture_output=True, text=True,
                       timeout=120)
    m = re.search(r"RESULT(.*?)END", r.stdout)
    assert m, f"chromium gave no result (rc {r.returncode}): {r.stderr[-2000:]}"
    return json.loads(m.group(1))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it "
                                              "with apt-get install -y chromium)")
def test_html_renders_in_headless_chromium_with_every_plot_visible(tmp_path):
    for name in sorted(EXAMPLES):
        rep = json.loads((REPORTS / name / "report.json").read_text())
        got = chromium_images(REPORTS / name / "report.html", tmp_path)
        assert got["title"] == rep["title"]
        assert got["sections"] == len(rep["sections"])
        files = [p["file"] for s in rep["sections"] for p in s["plots"]]
        assert [i["file"] for i in got["imgs"]] == files
        for img in got["imgs"]:
            assert img["complete"] and (img["w"], img["h"]) == (900, 500), img
            assert img["shown"] > 0, img
    # the check can fail: a corrupted plot decodes to nothing
    broken = tmp_path / "broken.html"
    text = (REPORTS / "80b-why-distributed" / "report.html").read_text()
    broken.write_text(re.sub(r"base64,[A-Za-z0-9+/=]{40}", "base64,AAAAAAAA", text, count=1))
    got = chromium_images(broken, tmp_path)
    assert got["imgs"] and got["imgs"][0]["w"] == 0


# --- writing: atomic, progress, bad input -----------------------------------------------------------
def test_progress_reports_every_step_and_ends_complete(tmp_path):
    seen = []
    write_report(ReportRequest("gpt2", seq=512), tmp_path / "r",
                 progress=lambda d, done, total: seen.append((d, done, total)))
    assert seen[-1][1] == seen[-1][2] and seen[-1][0] == "done"
    dones = [s[1] for s in seen]
    assert dones == sorted(dones)
    assert sum(1 for s in seen if s[0].startswith("plot ")) == 4


def test_json_output_names_the_answer_and_the_files(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["report", "llama-3-8b", "--inference", "--gpu", "l4", "--context", "8k",
                 "--concurrency", "4", "-o", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["files"] == sorted(p.name for p in out.iterdir())
    rep = json.loads((out / "report.json").read_text())
    assert got["answer"] == rep["data"]["answer"] and isinstance(got["answer"]["total_gpus"],
                                                                 int)


def test_rewriting_replaces_a_previous_report_and_leaves_no_temporaries(tmp_path):
    out = tmp_path / "r"
    assert main(["report", "gpt2", "--seq", "512", "-o", str(out)]) == 0
    assert main(["report", "gpt2", "--seq", "256", "-o", str(out)]) == 0
    assert json.loads((out / "report.json").read_text())["data"]["request"]["seq"] == 256
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


BAD = [
    ["report", "gpt5", "-o", "{out}"],
    ["report", "-o", "{out}"],
    ["report", "gpt2", "--params", "80e9", "-o", "{out}"],
    ["report", "gpt2", "--seq", "4096", "-o", "{out}"],  # past gpt2's learned positions
    ["report", "gpt2", "--seq", "0", "-o", "{out}"],
    ["report", "gpt2", "--batch", "-2", "-o", "{out}"],
    ["report", "gpt2", "--precision", "fp12", "-o", "{out}"],
    ["report", "gpt2", "--recompute", "some", "-o", "{out}"],
    ["report", "gpt2", "--tokens", "lots", "-o", "{out}"],
    ["report", "gpt2", "--gpu-gb", "-80", "-o", "{out}"],
    ["report", "gpt2", "--days", "0", "-o", "{out}"],
    ["report", "gpt2", "--gpu", "nosuchgpu", "-o", "{out}"],
    ["report", "llama-3.1-405b", "--gpu", "h100", "--tokens", "1T", "--max-gpus", "8", "-o",
     "{out}"],  # fits on no layout of 8 GPUs
    ["report", "bert-base-uncased", "--inference", "-o", "{out}"],
    ["report", "llama-3-8b", "--inference", "--kv-dtype", "fp6", "-o", "{out}"],
    ["report", "llama-3-8b", "--inference", "--concurrency", "0", "-o", "{out}"],
    ["report", "--params", "80e9", "--inference", "-o", "{out}"],
    ["report", "--params", "80e9", "--optimizer", "adafactor", "-o", "{out}"],
    ["report", "gpt2", "-o", "{file}"],
    ["report", "gpt2", "-o", "{foreign}"],
    ["report", "gpt2", "--seq", "128", "-o", "{unwritable}"],
]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a[1:-2]) or "no model" for a in BAD])
def test_bad_input_one_line_exit_2_and_nothing_written(tmp_path, capsys, argv):
    (tmp_path / "a-file").write_text("keep me")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("keep me")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    subs = {"{out}": str(tmp_path / "out"), "{file}": str(tmp_path / "a-file"),
            "{foreign}": str(tmp_path / "foreign"),
            # a name longer than the file system takes (255 bytes): refused before anything
            # is made (a 250-byte name is legal and now written; the parents made on a
            # failure are removed: test_report_safety.py::test_a_failed_write_removes_*)
            "{unwritable}": str(tmp_path / "made" / "x" / ("n" * 256))}
    assert main([subs.get(a, a) for a in argv]) == 2
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("txcalc: error"), captured.err
    assert "Traceback" not in captured.err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


# --- predicted against measured, when a validation report exists ------------------------------------
def test_validation_report_rows_are_shown_largest_error_first(tmp_path):
    val = tmp_path / "validation"
    val.mkdir()
    # the shape `txcalc validate` writes: totals {quantity: {predicted, measured}}, rows with
    # <quantity>_predicted/_measured, module lists per quantity; read loosely
    (val / "gpt2-cpu.json").write_text(json.dumps({
        "model": "gpt2", "device": "cpu", "batch": 1, "seq": 64,
        "totals": {"params": {"predicted": 124439808, "measured": 124439808,
                              "error_pct": 0.0}},
        "components": [{"component": "mlp.up_proj", "forward_flops_predicted": 990,
                        "forward_flops_measured": 1000, "forward_flops_error_pct": -1.0}],
        "layers": [{"layer": "0", "saved_bytes_predicted": 2100,
                    "saved_bytes_measured": 2000}],
        "modules": {"params": [{"module": "layers.0.attn.q_proj", "predicted": 590592,
                                "measured": 590592, "ops": ["layers.0.attn.q_proj"]}]}}))
    (val / "llama-3-8b-cpu.json").write_text(json.dumps({"model": "llama-3-8b", "totals": {
        "params": {"predicted": 1, "measured": 2}}}))
    out = tmp_path / "r"
    rep = write_report(ReportRequest("gpt2", seq=256), out, validation_dir=val)
    v = rep["data"]["validation"]
    assert v["file"] == "gpt2-cpu.json" and v["rows"] == 4 and v["exact"] == 2
    assert [(r["label"], round(r["error_pct"], 6)) for r in v["shown"]] == [
        ("layer 0 saved_bytes", 5.0), ("mlp.up_proj forward_flops", -1.0),
        ("totals.params", 0.0), ("layers.0.attn.q_proj params", 0.0)]
    assert {q["quantity"]: (q["pairs"], q["exact"]) for q in v["by_quantity"]} == {
        "params": (2, 2), "forward_flops": (1, 0), "saved_bytes": (1, 0)}
    md = (out / "report.md").read_text()
    assert "| layer 0 saved_bytes | 2,100 | 2,000 | +5.00% |" in md
    assert "device cpu, batch 1, seq 64" in md
    assert (out / "validation.png").read_bytes()[:8] == PNG_MAGIC
    other = build_report(ReportRequest("gpt2", seq=256), validation_dir=tmp_path / "none")
    assert "validation" not in other["data"]


def test_validation_reads_parallel_predicted_and_measured_trees(tmp_path):
    # the memory-by-phase shape of `txcalc validate --device cpu` (MemTracker)
    from txcalc.report.model import validation_rows
    raw = {"model": "llama-3-8b", "measured": {"after_forward": {"act": 100, "param": 7},
                                                "start": {"param": 7}},
           "predicted": {"after_forward": {"act": 98, "param": 7}, "peak_step": {"opt": 1}},
           "totals": {"after_forward": {"measured": 107, "predicted": 105}}}
    rows = {r["label"]: (r["quantity"], r["predicted"], r["measured"])
            for r in validation_rows(raw)}
    assert rows == {"after_forward act": ("bytes by phase", 98, 100),
                    "after_forward param": ("bytes by phase", 7, 7),
                    "totals.after_forward": ("after_forward", 105, 107)}


@pytest.mark.parametrize("inference", [False, True])
def test_a_report_on_a_gpu_without_bf16_says_it_took_fp16(inference):
    """A report asked without --precision on a T4 runs in fp16 as memory and fit do, and says
    so among its assumptions; the same precision given is not 'assumed', and an H100 report
    says nothing about precision. The GPU's lack of bf16 is the catalog's (Gpu.half_dtype),
    the words are the answers' (answers.common.half_precision), not typed here."""
    from txcalc.answers.common import half_precision
    from txcalc.engine.hardware import get_gpu
    assert get_gpu("t4").half_dtype == "fp16" and get_gpu("h100").half_dtype != "fp16"
    words = half_precision(None, "t4", serving=inference)[1]
    assert len(words) == 1 and "fp16" in words[0]

    def bullets(**kw):
        rep = build_report(ReportRequest(model="llama-3.2-1b", inference=inference, seq=512,
                                         **kw))
        sec = next(s for s in rep["sections"] if s["title"].startswith("Assumptions"))
        return rep, [b for b in sec["bullets"] if b.startswith("Assumed (not given): ")]

    rep, said = bullets(gpu="t4")
    assert f"Assumed (not given): {words[0]}." in said
    assert rep["data"]["request"]["precision"] == "fp16-mixed"
    assert "--precision" not in rep["command"]  # the command without it gives the same report
    _, given = bullets(gpu="t4", precision="fp16-mixed")
    assert not any("fp16" in b for b in given)
    _, h100 = bullets(gpu="h100")
    assert not any("precision" in b or "fp16" in b for b in h100)
