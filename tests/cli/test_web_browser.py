"""`txcalc serve` in headless Chromium (Python playwright driving Debian's chromium): the page
loads; a control change brings the page's figures to the CLI's `--json` answers (each figure
carries the JSON path and value it shows; the CLI runs as a separate process, with commands
typed here); a bad input shows the CLI's one line; no request leaves 127.0.0.1. Screenshots
go to each test's tmp_path.

Skips, saying why, without playwright or chromium; .ci/run sets TXCALC_REQUIRE_BROWSER=1, under
which a missing browser fails instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
HF = Path(__file__).parents[1] / "data" / "hf"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("TXCALC_REQUIRE_BROWSER") == "1"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-default-apps", "--disable-extensions"]


def _unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if CHROMIUM is None:
        return "chromium is not installed (.ci/run installs it: apt-get install -y chromium)"
    return None


WHY = _unavailable()
if WHY is not None:
    if REQUIRED:
        raise RuntimeError(f"TXCALC_REQUIRE_BROWSER=1 but {WHY}")
    pytest.skip(WHY, allow_module_level=True)

from playwright.sync_api import sync_playwright  # noqa: E402


# --- fixtures ----------------------------------------------------------------------------------


REQUESTS: list[str] = []  #: every URL the browser asked for, in this module


@pytest.fixture(scope="module")
def browser():
    profile = tempfile.mkdtemp(prefix="txcalc-chromium-")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 1000})
        ctx.on("request", lambda r: REQUESTS.append(r.url))
        try:
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser, server):
    pg = browser.new_page()
    problems: list[str] = []
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
          if m.type == "error" and "400" not in m.text else None)
    pg.goto(server.url)
    settle(pg, 0)
    yield pg
    pg.close()
    assert not problems, problems


# --- helpers -------------------------------------------------------------------------------------
def state(pg) -> tuple[str, int]:
    body = pg.locator("body")
    return body.get_attribute("data-state"), int(body.get_attribute("data-gen"))


def settle(pg, after: int, timeout_s: float = 120) -> str:
    """Wait until the page has drawn an answer newer than generation ``after`` and nothing is
    pending; the final state (ready or error)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        s, gen = state(pg)
        if gen > after and s in ("ready", "error"):
            return s
        time.sleep(0.05)
    raise AssertionError(f"the page did not settle: {state(pg)}")


def change(pg, controls: dict[str, str]) -> str:
    """Set controls as a user does (select, radio, type then Tab); wait for the new answer."""
    _, gen = state(pg)
    for name, value in controls.items():
        if name == "task":
            pg.check(f"input[name=task][value={value}]")
        elif pg.locator(f"#{name}").evaluate("e => e.tagName") == "SELECT":
            pg.select_option(f"#{name}", value)
        else:
            pg.fill(f"#{name}", value)
            pg.press(f"#{name}", "Tab")
    return settle(pg, gen)


def figures(pg) -> dict[str, str]:
    """{JSON path: value} of every figure the page shows."""
    pairs = pg.eval_on_selector_all("[data-key]", "els => els.map(e => [e.dataset.key, "
                                    "e.dataset.value, e.textContent])")
    for key, _, text in pairs:
        assert text.strip(), f"{key} is shown empty"
    return {key: value for key, value, _ in pairs}


def cli_json(argv: list[str]) -> dict:
    """``txcalc ARGV --json`` in a separate process, as a user runs it."""
    env = os.environ | {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "txcalc", *argv, "--json"], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def cli_error(argv: list[str]) -> str:
    env = os.environ | {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "txcalc", *argv, "--json"], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and r.stderr.startswith("txcalc: error: "), r.stderr
    return r.stderr.removeprefix("txcalc: error: ").rstrip("\n")


def at(obj, path: str):
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def assert_page_is_cli(pg, expected: dict[str, list[str]], must_show: set[str]) -> int:
    """Every figure on the page equals the value at its path in the CLI's JSON (exactly: the
    same double), the page lists the same commands, and ``must_show`` are among the figures.
    Returns how many figures were compared."""
    answers = {panel: cli_json(argv) for panel, argv in expected.items()}
    shown = figures(pg)
    assert must_show <= set(shown), must_show - set(shown)
    for key, value in shown.items():
        panel, _, path = key.partition(".")
        want = at(answers[panel], path)
        if isinstance(want, bool):
            assert value == str(want).lower(), key
        elif isinstance(want, (int, float)):
            assert float(value) == float(want), (key, value, want)
        else:
            assert value == str(want), key
    lines = pg.locator("#cli").text_content().splitlines()
    assert lines == ["txcalc " + " ".join(argv) + " --json" for argv in expected.values()]
    return len(shown)


H100 = ["--gpu", "h100-sxm"]
TRAIN_SHOWS = {"memory.total_bytes", "memory.gpu_bytes", "memory.peak_by_category.opt",
               "answer.min_gpus_to_fit", "answer.best.gpus", "answer.best.days",
               "answer.best.memory_bytes.weights", "params.total_params",
               "flops.forward_flops", "flops.by_component.0.forward_flops"}
SERVE_SHOWS = {"memory.total_bytes", "memory.kv_cache_bytes", "memory.weights_bytes",
               "answer.total_gpus", "answer.ttft_p99_s", "answer.itl_p99_s",
               "answer.output_tokens_per_s", "params.total_params", "flops.prefill_flops",
               "flops.decode_flops_per_token"}


def train_cmds(model, seq="4096", recompute="", extra=()):
    # the page's recompute, precision and optimizer controls default to auto: no flag, the
    # command's own default (the CLI's, stated in each answer's "assumed")
    work = ["--batch", "1", "--seq", seq, "--attn", "flash",
            *(["--recompute", recompute] if recompute else [])]
    return {"params": ["params", model], "flops": ["flops", model, *work],
            "memory": ["memory", model, *work, *H100],
            "answer": ["plan", "train", model, "--tokens", "1T", "--gpu", "h100-sxm", "--seq",
                       seq, "--attn", "flash", *extra]}


def serve_cmds(model, n_in, n_out, conc="8", load=None, weights=(), price=()):
    # the KV cache's dtype control defaults to auto: plan infer's and memory's own default
    ctx = str(int(n_in) + int(n_out))
    return {"params": ["params", model, *weights],
            "flops": ["flops", model, "--seq", n_in, "--context", ctx],
            "memory": ["memory", model, "--inference", "--context", ctx, "--concurrency", conc,
                       *weights, *H100],
            "answer": ["plan", "infer", model, "--gpu", "h100-sxm", "--input-len", n_in,
                       "--output-len", n_out, *(load or ["--concurrency", conc]),
                       *weights, *price]}


# --- the tests -----------------------------------------------------------------------------------
def test_the_page_loads_with_the_default_answer(page, tmp_path):
    page.screenshot(path=tmp_path / "loaded.png", full_page=True)
    assert state(page)[0] == "ready" and page.locator("#message").is_hidden()
    n = assert_page_is_cli(page, train_cmds("llama-3.1-8b"), TRAIN_SHOWS)
    assert n > 50
    # the memory bar: one rectangle per category of the peak (and the framework's), a legend
    # square per group, a line at the GPU's capacity
    bar = page.locator("#memory-bars svg").first
    groups = bar.locator("rect[data-group]").evaluate_all("rs => rs.map(r => r.dataset.group)")
    assert groups[:3] == ["weights", "gradients", "optimizer"] and groups[-1] == "framework"
    assert bar.locator(".legend-item").count() == len(set(groups))
    assert bar.locator("line").count() == 1


CASES = {
    "llama-3.1-8b-train": ({"seq": "8192", "recompute": "selective", "price": "2"},
                           train_cmds("llama-3.1-8b", "8192", "selective", ["--price", "2"]),
                           TRAIN_SHOWS | {"answer.best.cost"}),
    "mixtral-8x7b-train": ({"preset": "mixtral-8x7b", "tp": "2"},
                           train_cmds("mixtral-8x7b", extra=["--tp", "2"]), TRAIN_SHOWS),
    "gpt2-train": ({"preset": "gpt2", "seq": "1024", "plan_recompute": "full"},
                   train_cmds("gpt2", "1024", extra=["--recompute", "full"]), TRAIN_SHOWS),
    "llama-3.1-8b-serve": ({"task": "serve", "concurrency": "16", "price": "2"},
                           serve_cmds("llama-3.1-8b", "1024", "256", "16", price=["--price", "2"]),
                           SERVE_SHOWS | {"answer.cost_per_million_tokens"}),
    "mixtral-8x7b-serve": ({"preset": "mixtral-8x7b", "task": "serve", "weights": "fp8",
                            "rate": "2"},
                           serve_cmds("mixtral-8x7b", "1024", "256", load=["--rate", "2"],
                                      weights=["--weights", "fp8"]),
                           # at a rate: the plan's per-GPU view, the whole model's total only
                           SERVE_SHOWS - {"memory.kv_cache_bytes", "memory.weights_bytes"}
                           | {"answer.kv_capacity.kv_cache_bytes",
                              "answer.kv_capacity.weights_bytes"}),
    "gpt2-serve": ({"preset": "gpt2", "task": "serve", "input_len": "512", "output_len": "64"},
                   serve_cmds("gpt2", "512", "64"), SERVE_SHOWS),
    "t5-base-serve": ({"preset": "t5-base", "task": "serve", "input_len": "256"},
                      serve_cmds("t5-base", "256", "256"), SERVE_SHOWS),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_control_change_brings_the_clis_numbers(page, case, tmp_path):
    controls, expected, must_show = CASES[case]
    before = figures(page)
    assert change(page, controls) == "ready", page.locator("#message").text_content()
    after = figures(page)
    assert after != before  # the figures moved
    page.screenshot(path=tmp_path / f"{case}.png", full_page=True)
    assert_page_is_cli(page, expected, must_show)


def test_fine_tuning_answers_with_fit(page, tmp_path):
    assert change(page, {"task": "finetune", "finetune": "qlora", "lora_rank": "8"}) == "ready"
    page.screenshot(path=tmp_path / "qlora.png", full_page=True)
    ft = ["--finetune", "qlora", "--lora-rank", "8", "--lora-targets", "all-linear",
          "--base-format", "nf4"]
    work = ["--batch", "1", "--seq", "4096", "--attn", "flash"]  # recompute: auto
    states = []  # precision and optimizer: auto (the CLI's defaults, the recipe's optimizer)
    assert_page_is_cli(page, {
        "params": ["params", "llama-3.1-8b"], "flops": ["flops", "llama-3.1-8b", *work, *ft],
        "memory": ["memory", "llama-3.1-8b", *work, *states, *ft, *H100],
        "answer": ["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "1", *states,
                   "--attn", "flash", *ft]},
        {"answer.fits", "answer.max_seq", "memory.total_bytes", "params.total_params"})


@pytest.mark.parametrize("controls, argv", [
    ({"seq": "0"}, ["memory", "llama-3.1-8b", "--seq", "0"]),
    ({"model": "llama-3.1-8bb"}, ["params", "llama-3.1-8bb"]),
    ({"task": "serve", "input_len": "12x"}, ["plan", "infer", "llama-3.1-8b", "--input-len",
                                             "12x", "--output-len", "256", "--rate", "1"]),
], ids=["seq-0", "unknown-model", "input-len"])
def test_a_bad_input_shows_the_clis_one_line(page, controls, argv, tmp_path):
    assert change(page, controls) == "error"
    page.screenshot(path=tmp_path / "error.png", full_page=True)
    msg = page.locator("#message")
    assert msg.is_visible()
    assert msg.text_content() == cli_error(argv)
    body = page.locator("body").text_content()
    assert "Traceback" not in body and "Error:" not in body
    # a good value again: the message goes, the figures come back
    fix = {k: {"seq": "2048", "model": "llama-3.1-8b", "input_len": "1024"}[k]
           for k in controls if k != "task"}
    assert change(page, fix) == "ready" and msg.is_hidden()


def test_an_uploaded_config_json_and_the_report_link(page, browser, server, tmp_path):
    _, gen = state(page)
    page.set_input_files("#upload", str(HF / "mixtral-8x7b.json"))
    assert settle(page, gen) == "ready"
    model = page.locator("#model").input_value()
    assert model.endswith("/mixtral-8x7b/config.json") and model.startswith(str(server.workdir))
    assert figures(page)["params.total_params"] == str(cli_json(
        ["params", str(HF / "mixtral-8x7b.json")])["total_params"])
    assert change(page, {"preset": "gpt2", "seq": "512"}) == "ready"
    with browser.expect_page(timeout=120_000) as info:
        page.click("#report-link")
    report = info.value
    report.wait_for_load_state(timeout=120_000)
    report.screenshot(path=tmp_path / "report.png", full_page=True)
    assert report.title().startswith("Capacity report: training gpt2")
    report.close()


# --- widths, charts, legend colours, the new controls ---------------------------------------------
def settle_charts(pg, timeout_s: float = 120) -> None:
    """Wait until the charts of the page's latest answer are drawn."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pg.locator("#charts").get_attribute("data-gen") == state(pg)[1].__str__():
            return
        time.sleep(0.05)
    raise AssertionError("the charts were not drawn")


#: what the browser reads back: the page's widths, every element wider than the screen, and the
#: colours of each legend against what it labels
READ_BACK = """() => {
  const doc = document.documentElement, W = window.innerWidth;
  const wide = [...document.querySelectorAll("body *")].filter((e) => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && (r.right > W + 0.5 || r.left < -0.5) && !e.closest("section");
  }).map((e) => e.tagName + "#" + e.id);
  const scrolls = [...document.querySelectorAll("section")].filter(
    (e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.id);
  const charts = [...document.querySelectorAll("svg.chart")].map((c) => ({
    id: c.dataset.chart,
    lines: Object.fromEntries([...c.querySelectorAll("path.series")].map(
      (p) => [p.dataset.series, p.getAttribute("stroke")])),
    legend: Object.fromEntries([...c.querySelectorAll(".legend-item")].map(
      (g) => [g.dataset.series, g.querySelector("rect").getAttribute("fill")])),
    points: c.querySelectorAll("circle").length}));
  const bars = [...document.querySelectorAll("#memory-bars svg.bar")].map((b) => ({
    segments: [...b.querySelectorAll("rect[data-group]")].map(
      (r) => [r.dataset.group, r.getAttribute("fill")]),
    legend: [...b.querySelectorAll(".legend-item")].map(
      (g) => [g.dataset.group, g.querySelector("rect").getAttribute("fill"),
              g.querySelector("text").textContent])}));
  const swatches = [...document.querySelectorAll("#memory-table svg.swatch")].map(
    (s) => [s.dataset.group, s.querySelector("rect").getAttribute("fill")]);
  return {scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth, wide, scrolls, charts,
          bars, swatches};
}"""


@pytest.mark.parametrize("width", [1400, 420])
def test_each_task_fits_the_width_with_charts_and_right_legends(page, width, tmp_path):
    """At a desktop's and a phone's width: nothing wider than the screen (scrollWidth <=
    clientWidth, no element past the edge), each task's charts drawn with a legend whose
    colours are its lines', and each memory bar's legend the colours of its own segments, one
    colour per group on every bar and in the table (the per-GPU bar once showed activations
    in the first bar's "fp32 master" colour)."""
    from txcalc.answers.costs import MEMORY_GROUPS
    page.set_viewport_size({"width": width, "height": 900})
    want = {"train": {"memory-vs-seq", "frontier"}, "finetune": {"memory-vs-seq"},
            "serve": {"kv-vs-context", "latency-vs-load"}}
    colour_of: dict[str, str] = {}
    for task in ("train", "finetune", "serve"):
        if task != "train":  # the page starts in train
            assert change(page, {"task": task}) == "ready"
        settle_charts(page)
        page.screenshot(path=tmp_path / f"{task}-{width}.png", full_page=True)
        got = page.evaluate(READ_BACK)
        assert got["scrollWidth"] <= got["clientWidth"] == width, (task, got["scrollWidth"])
        assert not got["wide"], (task, got["wide"])
        assert not got["scrolls"], (task, got["scrolls"])  # no panel scrolls sideways
        assert {c["id"] for c in got["charts"]} == want[task], task
        for c in got["charts"]:
            assert c["lines"] and c["legend"] == c["lines"], c  # one legend entry per line
            assert len(set(c["lines"].values())) == len(c["lines"])
            assert c["points"] >= 5 * len(c["lines"]) - 2, c
        assert got["bars"], task
        for b in got["bars"]:
            fills = dict(b["segments"])
            assert len({(g, f) for g, f in b["segments"]}) == len(fills)  # a group, a colour
            assert [[g, fills[g], MEMORY_GROUPS[g]] for g in fills] == b["legend"], b
            for g, f in fills.items():
                assert colour_of.setdefault(g, f) == f, (task, g)  # the same on every bar
        for g, f in got["swatches"]:
            assert colour_of[g] == f, (task, g)
    assert len(set(colour_of.values())) == len(colour_of)
    assert {"optimizer", "activations", "kv_cache"} <= set(colour_of)


def test_the_new_controls_reach_the_answers(page):
    """GPUs, global batch, precision and optimizer (auto: the CLI's default, stated), the
    serving rate (the per-GPU memory view and the latency chart follow it), the fine-tuning
    report link; the serving mode control is offered where plan infer has --mode."""
    from txcalc.web.calc import serve_modes
    assert change(page, {"preset": "gpt2", "seq": "512", "tokens": "10B", "gpus": "16",
                         "global_batch": "64"}) == "ready"
    shown = figures(page)
    assert shown["answer.best.gpus"] == "16" and shown["answer.global_batch"] == "64"
    cli_lines = page.locator("#cli").text_content()
    assert "--gpus 16 --global-batch 64" in cli_lines and "--precision" not in cli_lines
    # auto precision on a GPU without bf16: fp16-mixed, as the CLI, and the page says so
    assert change(page, {"gpu": "t4"}) == "ready"
    said = page.locator("#assumed").text_content()
    assert "precision fp16-mixed: t4 has no bf16" in said, said
    assert change(page, {"gpu": "h100-sxm", "precision": "fp32", "optimizer": "sgd"}) == "ready"
    assert page.locator("#assumed-panel").is_hidden()
    assert "--precision fp32 --optimizer sgd" in page.locator("#cli").text_content()
    assert figures(page)["memory.peak_by_category.param"] == str(
        cli_json(["memory", "gpt2", "--seq", "512", "--precision", "fp32", "--optimizer", "sgd",
                  "--gpu", "h100-sxm"])["peak_by_category"]["param"])
    assert change(page, {"task": "finetune"}) == "ready"
    assert page.locator("#report-link").text_content() == "Full fine-tuning report"
    assert "--finetune lora" in page.locator("#report-command").text_content()
    assert change(page, {"task": "serve", "rate": "3"}) == "ready"
    settle_charts(page)
    title = page.locator("#memory-bars figcaption").first.text_content()
    assert title.startswith("per GPU of the plan for 3 requests/s"), title
    load = page.locator("svg.chart[data-chart=latency-vs-load] circle").count()
    assert load >= 10
    mode = page.locator("#mode")
    assert mode.is_visible() == bool(serve_modes())
    assert change(page, {"rate": "", "concurrency": "4"}) == "ready"
    titles = page.locator("#memory-bars figcaption").all_text_contents()
    assert titles[0].startswith("per GPU of the plan for 4 concurrent requests")
    assert titles[1].startswith("whole model, weights and the KV cache of 4 sequence(s)")


def test_no_request_left_this_machine(page, server):
    """Runs last in the module: every request of every test above went to this server."""
    change(page, {"task": "serve"})
    port = server.server_address[1]
    assert REQUESTS
    elsewhere = [u for u in REQUESTS if urlsplit(u).netloc != f"127.0.0.1:{port}"
                 and not u.startswith(("data:", "about:blank"))]
    assert not elsewhere, elsewhere[:10]
