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
                                      weights=["--weights", "fp8"]), SERVE_SHOWS),
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


def test_no_request_left_this_machine(page, server):
    """Runs last in the module: every request of every test above went to this server."""
    change(page, {"task": "serve"})
    port = server.server_address[1]
    assert REQUESTS
    elsewhere = [u for u in REQUESTS if urlsplit(u).netloc != f"127.0.0.1:{port}"
                 and not u.startswith(("data:", "about:blank"))]
    assert not elsewhere, elsewhere[:10]
