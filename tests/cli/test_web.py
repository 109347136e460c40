"""`txcalc serve` without a browser: the JSON API is the CLI's `--json`, bad input is HTTP 400
with the CLI's one line, the server starts fast and closes cleanly (tests/cli/test_web_browser.py
drives the page in headless Chromium)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from urllib.parse import urlencode

import pytest

from txcalc.cli import main
from txcalc.engine.hardware import load_catalog
from txcalc.web import calc
from txcalc.web.server import make_server

ROOT = Path(__file__).resolve().parents[2]
HF = Path(__file__).parents[1] / "data" / "hf"


def cli(argv: list[str]) -> tuple[int, str, str]:
    """``txcalc ARGV`` through the CLI's entry point: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def cli_json(argv: list[str]) -> dict:
    rc, out, err = cli([*argv, "--json"])
    assert rc == 0, err
    return json.loads(out)


def get(srv, path: str, headers: dict | None = None, data: bytes | None = None):
    """(status, headers, body bytes) of one request to the test server."""
    req = urllib.request.Request(srv.url.rstrip("/") + path, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def api(srv, panel: str, **form) -> tuple[int, dict]:
    status, _, body = get(srv, f"/api/{panel}?" + urlencode(form))
    return status, json.loads(body)


# --- the form -> the commands ---------------------------------------------------------------------
def test_the_commands_of_each_task():
    # precision, optimizer and the KV cache's dtype left at auto: no flag, the CLI's defaults
    train = calc.commands(calc.form_of({"model": "gpt2", "seq": "1024", "price": "2",
                                        "tp": "2", "plan_recompute": "full", "gpus": "16",
                                        "global_batch": "256"}))
    h100 = ["--gpu", "h100-sxm"]
    assert train == {
        "params": ["params", "gpt2"],
        "flops": ["flops", "gpt2", "--batch", "1", "--seq", "1024", "--attn", "flash"],
        "memory": ["memory", "gpt2", "--batch", "1", "--seq", "1024", "--attn", "flash",
                   *h100],
        "answer": ["plan", "train", "gpt2", "--tokens", "1T", "--gpu", "h100-sxm", "--seq",
                   "1024", "--attn", "flash", "--price", "2", "--gpus", "16",
                   "--global-batch", "256", "--tp", "2", "--recompute", "full"]}
    pinned = calc.commands(calc.form_of({"model": "gpt2", "precision": "fp32",
                                         "optimizer": "sgd"}))
    assert pinned["memory"][-6:] == ["--precision", "fp32", "--optimizer", "sgd", *h100]
    serve = calc.commands(calc.form_of({"model": "gpt2", "task": "serve", "input_len": "1k",
                                        "output_len": "100", "rate": "3", "weights": "int8",
                                        "gpu": "h200"}))
    assert serve["flops"] == ["flops", "gpt2", "--seq", "1k", "--context", "1124"]
    assert serve["memory"] == ["memory", "gpt2", "--inference", "--context", "1124",
                               "--concurrency", "8", "--weights", "int8", "--gpu", "h200"]
    assert serve["answer"] == ["plan", "infer", "gpt2", "--gpu", "h200", "--input-len", "1k",
                               "--output-len", "100", "--rate", "3", "--weights", "int8"]
    ft = calc.commands(calc.form_of({"model": "gpt2", "task": "finetune", "finetune": "qlora",
                                     "lora_rank": "8"}))
    assert ft["answer"] == ["fit", "gpt2", "--gpu", "h100-sxm", "--batch", "1",
                            "--attn", "flash", "--finetune", "qlora", "--lora-rank", "8",
                            "--lora-targets", "all-linear", "--base-format", "nf4"]
    assert ft["memory"][-2:] == h100 and "--base-format" in ft["flops"]


def test_bad_forms_are_refused_with_one_line():
    with pytest.raises(calc.WebInputError, match="unknown control.*'sequence'"):
        calc.form_of({"sequence": "1"})
    with pytest.raises(calc.WebInputError, match=r"task \('deploy'\) must be one of"):
        calc.form_of({"task": "deploy"})
    with pytest.raises(calc.WebInputError, match="'--help'"):
        calc.form_of({"model": "--help"})
    with pytest.raises(calc.WebInputError, match="choose a model"):
        calc.form_of({"model": " "})


# --- the API: the CLI's JSON, the CLI's messages --------------------------------------------------
CASES = [
    {"model": "llama-3.1-8b", "price": "2"},
    {"model": "mixtral-8x7b", "task": "serve", "price": "3", "concurrency": "4"},
    {"model": "t5-base", "task": "serve", "input_len": "512", "output_len": "64", "rate": "2"},
    {"model": "gpt2", "task": "finetune", "finetune": "lora", "seq": "512"},
]


@pytest.mark.parametrize("form", CASES, ids=lambda f: f"{f['model']}-{f.get('task', 'train')}")
def test_every_panel_answers_the_cli_json(server, form):
    _, _, body = get(server, "/api/commands?" + urlencode(form))
    shown = json.loads(body)
    for panel, argv in calc.commands(calc.form_of(form)).items():
        status, headers, body = get(server, f"/api/{panel}?" + urlencode(form))
        assert status == 200, body
        rc, out, err = cli([*argv, "--json"])
        assert rc == 0, err
        assert body.decode() == out, panel  # the CLI's JSON, byte for byte
        assert headers["X-Txcalc-Command"] == calc.shell_line(argv)
        assert shown["commands"][panel] == "txcalc " + " ".join(argv)
        assert shown["argv"][panel] == argv


def test_the_json_keeps_exact_integers(server):
    # a 405B model's training FLOPs are far past 2**53: the API's ints stay exact
    status, got = api(server, "flops", model="llama-3.1-405b", seq="8192", batch="8")
    assert status == 200
    assert got["forward_flops"] > 2**53 and isinstance(got["forward_flops"], int)
    assert got == cli_json(["flops", "llama-3.1-405b", "--batch", "8", "--seq", "8192",
                            "--attn", "flash", "--recompute", "none"])


@pytest.mark.parametrize("form, panel", [
    ({"seq": "0"}, "memory"),
    ({"model": "llama-3.1-8bb"}, "params"),
    ({"gpu": "h1000"}, "answer"),
    ({"task": "serve", "input_len": "abc"}, "answer"),
    ({"tokens": "lots"}, "answer"),
    ({"task": "finetune", "finetune": "qlora", "precision": "fp32"}, "answer"),
], ids=["seq0", "model", "gpu", "input-len", "tokens", "qlora-fp32"])
def test_bad_input_is_400_with_the_cli_line(server, form, panel):
    status, got = api(server, panel, **form)
    assert status == 400 and set(got) <= {"error", "command"}
    assert "Traceback" not in got["error"] and "\n" not in got["error"]
    try:
        argv = calc.commands(calc.form_of(form))[panel]
    except calc.TxcalcError as e:  # refused before a command is built: the library's message
        assert got["error"] == str(e)
        return
    rc, out, err = cli([*argv, "--json"])
    assert rc == 2 and out == ""
    assert err == f"txcalc: error: {got['error']}\n"
    assert got["command"] == calc.shell_line(argv)


def test_requests_that_name_no_command(server):
    status, got = api(server, "memory", sex="1")
    assert status == 400 and got["error"].startswith("unknown control(s) 'sex'")
    status, _, body = get(server, "/api/memory?seq=1&seq=2")
    assert status == 400 and b"given twice: seq" in body
    status, _, body = get(server, "/etc/passwd")
    assert status == 404 and json.loads(body)["error"].startswith("no page '/etc/passwd'")
    status, _, body = get(server, "/reports/1/../../x")
    assert status == 404


def test_a_foreign_host_is_refused(server):
    """A page elsewhere that rebinds its DNS name to 127.0.0.1 sends its own Host."""
    status, _, body = get(server, "/api/options", {"Host": "evil.example:80"})
    assert status == 403 and b"not this server's address" in body
    host, port = server.server_address
    status, _, _ = get(server, "/api/options", {"Host": f"localhost:{port}"})
    assert status == 200


def test_the_peak_labels_are_the_memory_commands():
    from txcalc.cli.costs_cmd import _PEAK_PARTS
    assert calc.PEAK_LABELS == _PEAK_PARTS


def test_options_are_the_librarys_names(server):
    status, _, body = get(server, "/api/options")
    opts = json.loads(body)
    from txcalc.engine.memory import PRECISIONS
    from txcalc.model.presets import PRESETS
    assert opts["presets"] == list(PRESETS) and opts["precisions"] == list(PRECISIONS)
    assert {g["name"]: g["memory_bytes"] for g in opts["gpus"]} == {
        g.name: g.memory_bytes for g in load_catalog().values()}
    assert set(opts["defaults"]) == set(calc.DEFAULTS)


def test_the_page_and_its_files(server):
    status, headers, body = get(server, "/")
    assert status == 200 and b"<title>txcalc what-if</title>" in body
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    for path in ("/static/app.js", "/static/app.css"):
        status, _, body = get(server, path)
        assert status == 200 and body
    js = get(server, "/static/app.js")[2].decode()
    html = get(server, "/")[2].decode()
    for text in (js, html):  # no CDN, no other host: every URL the page names is its own
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text and "//cdn" not in text


def test_an_uploaded_config_json_is_the_model(server):
    raw = (HF / "llama-3.1-8b.json").read_bytes()
    status, _, body = get(server, "/api/upload?name=llama-3.1-8b.json",
                          {"Content-Type": "application/json"}, raw)
    assert status == 200
    path = json.loads(body)["model"]
    assert Path(path).read_bytes() == raw and str(server.workdir) in path
    status, got = api(server, "params", model=path)
    assert status == 200 and got == cli_json(["params", str(HF / "llama-3.1-8b.json")])
    assert got["total_params"] == 8_030_261_248  # meta-llama/Llama-3.1-8B's model card: 8.03B
    for bad, message in ((b"{not json", "not JSON text"), (b"[1, 2]", "not an object"),
                         (b"\xff\xfe", "not JSON text")):
        status, _, body = get(server, "/api/upload", {"Content-Type": "application/json"}, bad)
        assert status == 400 and message in json.loads(body)["error"]
    import http.client  # a body announced larger than 4 MiB is refused before it is read
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    conn.request("POST", "/api/upload", body=b"{}", headers={"Content-Length": str(5 * 2**20)})
    r = conn.getresponse()
    assert r.status == 400 and "upload must be 1 byte to 4,194,304 bytes, not 5,242,880" \
        in json.loads(r.read())["error"]
    conn.close()
    # a config.json txcalc refuses: the CLI's message for it
    status, _, body = get(server, "/api/upload", {"Content-Type": "application/json"},
                          b'{"model_type": "llama", "hidden_size": 100}')
    path = json.loads(body)["model"]
    status, got = api(server, "params", model=path)
    rc, _, err = cli(["params", path, "--json"])
    assert status == 400 and rc == 2 and err == f"txcalc: error: {got['error']}\n"


def test_the_report_link_writes_and_serves_the_report(server):
    form = {"model": "gpt2", "seq": "512", "tokens": "1B"}
    _, _, body = get(server, "/api/commands?" + urlencode(form))
    link = json.loads(body)["report"]
    assert link["command"] == ("txcalc report gpt2 --out report --gpu h100-sxm --batch 1 "
                               "--seq 512 --attn flash --tokens 1B")
    status, headers, body = get(server, link["url"])
    assert status == 200 and b"Capacity report: training gpt2" in body
    assert headers["Content-Security-Policy"].startswith("default-src 'none'")
    status, _, body = get(server, "/report?model=gpt2&seq=0")
    assert status == 400 and b"--seq (0)" in body


# --- the server: fast start, clean close ----------------------------------------------------------
def test_the_server_starts_fast_and_closes_cleanly():
    t0 = time.perf_counter()
    srv = make_server("127.0.0.1", 0)
    started = time.perf_counter() - t0
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    th.start()
    status, _, _ = get(srv, "/api/options")
    port, workdir = srv.server_address[1], srv.workdir
    srv.shutdown()
    srv.server_close()
    th.join(5)
    assert status == 200 and started < 0.5, started
    assert not th.is_alive() and not workdir.exists()
    with socket.socket() as s:  # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def _env():
    return os.environ | {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_txcalc_serve_prints_its_url_and_stops_on_ctrl_c():
    p = subprocess.Popen([sys.executable, "-m", "txcalc", "serve", "--port", "0", "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                         cwd=ROOT)
    try:
        line = p.stdout.readline()
        assert line.startswith("txcalc: the what-if page is at http://127.0.0.1:"), line
        url = line.split(" at ")[1].split()[0]
        with urllib.request.urlopen(url, timeout=30) as r:
            assert r.status == 200
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and err == "txcalc: interrupted (SIGINT)\n"


def test_txcalc_serve_on_a_busy_port_says_so_in_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "txcalc", "serve", "--port", str(port)],
                           capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"txcalc: error: cannot listen on 127.0.0.1:{port}: ")
    assert r.stderr.count("\n") == 1
    r = subprocess.run([sys.executable, "-m", "txcalc", "serve", "--port", "70000"],
                       capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "--port" in r.stderr and r.stderr.count("\n") == 1


def test_the_hub_ids_in_the_local_cache_are_offered(tmp_path, monkeypatch):
    pytest.importorskip("txcalc.model.hub", reason="txcalc.model.hub (Hub ids) is not in this tree")
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--meta-llama--Llama-3.1-8B"  # the Hub cache's own layout
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_bytes(
        (HF / "llama-3.1-8b.json").read_bytes())
    (tmp_path / "models--org--weights-only" / "refs").mkdir(parents=True)  # no config.json
    (tmp_path / "datasets--org--data").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert calc.cached_hub_ids() == ["meta-llama/Llama-3.1-8B"]
    assert calc.options()["hub_models"] == ["meta-llama/Llama-3.1-8B"]
    got = calc.run_json(["params", "meta-llama/Llama-3.1-8B"])
    assert got["total_params"] == 8_030_261_248
    assert got == cli_json(["params", "meta-llama/Llama-3.1-8B"])


# --- the charts and the memory hierarchy ----------------------------------------------------------
def _substituted(command: str, value) -> list[str]:
    """A chart's command (``txcalc ... N ... --json (note)``) with its placeholder set."""
    import shlex
    words = shlex.split(command.partition(" --json")[0])[1:]
    return [str(value) if w in ("N", "R") else w for w in words]


@pytest.mark.parametrize("form", [{"model": "llama-3.2-1b", "seq": "1024", "tokens": "10B"},
                                  {"model": "llama-3.2-1b", "task": "serve", "rate": "4",
                                   "input_len": "256", "output_len": "64"}],
                         ids=["train", "serve-rate"])
def test_each_chart_point_is_its_commands_answer(server, form):
    """Every chart the page draws: a middle and the last point of each series equal the JSON
    of the chart's command with the point's x, run through the CLI (the frontier: plan train
    --gpus N, whose best.days is the frontier's point)."""
    status, _, body = get(server, "/api/charts?" + urlencode(form))
    assert status == 200, body
    charts = json.loads(body)["charts"]
    want = {"train": ["memory-vs-seq", "frontier"],
            "serve-rate": ["kv-vs-context", "latency-vs-load"]}
    assert [c["id"] for c in charts] == want["serve-rate" if "rate" in form else "train"]
    for c in charts:
        assert not c["left_out"], c["left_out"]
        for s in c["series"]:
            assert len(s["points"]) >= 5, (c["id"], s["name"])
            xs = [x for x, _ in s["points"]]
            assert xs == sorted(set(xs))
            for x, y in (s["points"][len(xs) // 2], s["points"][-1]):
                got = cli_json(_substituted(c["command"], f"{x:g}" if isinstance(x, float)
                                            else x))
                assert (got["best"]["days"] if c["id"] == "frontier" else got[s["key"]]) == y, \
                    (c["id"], s["name"], x)


def test_the_charts_follow_the_page(server):
    """A deadline on the training frontier moves nothing (the frontier is every GPU count);
    a longer sequence moves the memory chart's points to longer sequences."""
    def first(form, cid):
        _, _, body = get(server, "/api/charts?" + urlencode(form))
        return next(c for c in json.loads(body)["charts"] if c["id"] == cid)
    short = first({"model": "gpt2", "task": "finetune", "seq": "256"}, "memory-vs-seq")
    long = first({"model": "gpt2", "task": "finetune", "seq": "1024"}, "memory-vs-seq")
    assert 256 in [x for x, _ in short["series"][0]["points"]]
    assert 1024 in [x for x, _ in long["series"][0]["points"]]
    assert "--finetune lora" in long["command"]
    # gpt2's learned positions stop at 1024: longer sequences are named, not drawn
    assert "--seq 2048" in long["left_out"]


def test_every_memory_category_has_its_place_in_the_hierarchy():
    """The categories of memory (peak_by_category), plan train (memory_bytes per GPU) and plan
    infer (kv_capacity) each sit in one group of MEMORY_GROUPS: the page draws every one."""
    from txcalc.answers.costs import MEMORY_GROUPS, MEMORY_PARTS
    from txcalc.train.planner import CATEGORIES
    mem = cli_json(["memory", "gpt2", "--seq", "256"])
    infer = cli_json(["plan", "infer", "gpt2", "--input-len", "256", "--output-len", "64",
                      "--rate", "2"])
    kv_cats = [k for k in infer["kv_capacity"] if k.endswith("_bytes") and k not in (
        "total_bytes", "budget_bytes", "held_allreduce_bytes", "block_bytes")]
    for key in [*(k for k in mem["peak_by_category"] if k != "total"), *CATEGORIES, *kv_cats]:
        assert key in MEMORY_PARTS, key
    assert {g for g, _ in MEMORY_PARTS.values()} == set(MEMORY_GROUPS)
    # the groups of one answer add up to its total
    assert sum(v for k, v in mem["peak_by_category"].items() if k != "total") \
        == mem["peak_by_category"]["total"]
    assert MEMORY_PARTS["master"][0] == "optimizer"  # the fp32 master weights: optimizer states


def test_fine_tuning_links_a_fine_tuning_report(server):
    form = {"model": "gpt2", "task": "finetune", "seq": "256", "finetune": "lora"}
    _, _, body = get(server, "/api/commands?" + urlencode(form))
    link = json.loads(body)["report"]
    assert "--finetune lora" in link["command"] and "--tokens" not in link["command"]
    # auto: the report's own default, the memory and fit panels' (gradient checkpointing)
    assert "--recompute" not in link["command"]
    status, _, body = get(server, link["url"])
    assert status == 200 and b"Fine-tuning: adapters and the frozen base" in body
    assert b"Assumed (not given): recompute full" in body


def test_a_serving_mode_is_refused_where_plan_infer_has_none():
    if calc.serve_modes():
        form = calc.form_of({"task": "serve", "mode": calc.serve_modes()[0]})
        assert calc.commands(form)["answer"][-2:] == ["--mode", calc.serve_modes()[0]]
    else:
        with pytest.raises(calc.WebInputError, match=r"mode \('disaggregated'\).*no --mode"):
            calc.commands(calc.form_of({"task": "serve", "mode": "disaggregated"}))


#: a value other than the starting one for each of the page's controls
OTHER = {"model": "gpt2", "gpu": "h200", "price": "2", "precision": "fp32", "optimizer": "sgd",
         "seq": "512", "batch": "2", "attn": "sdpa", "recompute": "selective",
         "finetune": "qlora", "lora_rank": "8", "lora_targets": "attention",
         "base_format": "fp4", "tokens": "10B", "days": "30", "gpus": "16",
         "global_batch": "64", "weights": "int8", "kv_dtype": "fp8", "input_len": "512",
         "output_len": "64", "concurrency": "4", "rate": "2", "ttft_p99": "2s",
         "itl_p99": "50ms", "mode": "auto", "tp": "2", "pp": "2", "cp": "2", "ep": "2",
         "zero": "1", "micro_batch": "2", "plan_recompute": "full", "replicas": "2"}


def test_every_control_of_the_page_reaches_a_command():
    """Each control the page shows (index.html's name=...) is a control of the form and,
    changed, changes the commands (the panels' or the report link's) of each task it is shown
    for (its fieldset's or label's data-tasks): no control the answers ignore."""
    import re
    html = (ROOT / "txcalc" / "web" / "static" / "index.html").read_text()
    shown: dict[str, set[str]] = {}
    tasks = set(calc.TASKS)
    for line in html.splitlines():
        if "<fieldset" in line:
            m = re.search(r'data-tasks="([^"]+)"', line)
            tasks = set(m.group(1).split()) if m else set(calc.TASKS)
        for name in re.findall(r'<(?:input|select)[^>]*\bname="([a-z0-9_]+)"', line):
            m = re.search(r'<label data-tasks="([^"]+)"', line)
            shown.setdefault(name, set()).update(set(m.group(1).split()) if m else tasks)
    assert set(shown) == set(calc.DEFAULTS), set(shown) ^ set(calc.DEFAULTS)
    for name, where in shown.items():
        if name == "task" or (name == "mode" and not calc.serve_modes()):
            continue
        for task in where:
            base = {"task": task, **({"finetune": "qlora"} if name == "base_format" else {})}
            def asked(form):  # the panels' commands and the report link's
                form = calc.form_of(form)
                return calc.commands(form), calc.report_command(form, "out")
            assert asked({**base, name: OTHER[name]}) != asked(base), (name, task)
