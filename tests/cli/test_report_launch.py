"""The report's launch section (issue 31): the files that run the plan's best layout, the same
as ``txcalc plan train --emit FORMAT`` (a serving report: ``plan infer --emit FORMAT``) writes
for the same question, parsed back (TOML; the vllm line by plan infer --from-config), and a
one-line refusal for a framework that cannot express the plan."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tests.cli.cli_run import run, run_json
from tests.cli.test_emit_formats import flags
from txcalc.emit import FORMATS

REPORT = Path(__file__).parents[2] / "reports" / "llama-3.1-405b-train-h100"
ASK = ["llama-3.1-405b", "--gpu", "h100", "--tokens", "15.6T", "--seq", "8192", "--days", "100"]


def _body(text: str) -> str:
    """A file without its header line naming the command that wrote it (which differs)."""
    lines = text.splitlines(keepends=True)
    assert sum("written by txcalc" in x for x in lines) == 1, text[:200]
    return "".join(x for x in lines if "written by txcalc" not in x)


@pytest.fixture(scope="module")
def launch():
    rep = json.loads((REPORT / "report.json").read_text())
    return rep["data"]["plan"], {e["format"]: e for e in rep["data"]["plan"]["launch"]}


def _files_or_refusals(by_format: dict, command: str) -> None:
    """Each of ``command``'s formats has its files (the main one among them) or a one-line
    refusal naming the format."""
    assert set(by_format) == {f for f, (c, _, _) in FORMATS.items() if c == command}
    for fmt, e in by_format.items():
        if "refused" in e:
            assert e["refused"].startswith(f"--emit {fmt}: ") and "\n" not in e["refused"]
        else:
            assert e["main"] in e["files"]


def _shown(md: str, by_format: dict) -> None:
    """The Markdown has the Launch section and every file, under its format and name."""
    assert "## Launch: the files that run this plan" in md
    for fmt, e in by_format.items():
        for name, text in e.get("files", {}).items():
            assert f"*{fmt}: {name}*" in md and text.rstrip("\n") in md


def test_every_training_format_has_a_file_or_a_one_line_refusal(launch):
    _, by_format = launch
    _files_or_refusals(by_format, "plan train")
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
    _shown((REPORT / "report.md").read_text(), launch[1])


# --- a serving report: plan infer's files --------------------------------------------------
SERVE_REPORT = Path(__file__).parents[2] / "reports" / "llama-3.1-70b-serve-h200-128k"
SERVE_ASK = ["llama-3.1-70b", "--gpu", "h200", "--context", "131072", "--concurrency", "16"]


@pytest.fixture(scope="module")
def serve_launch():
    rep = json.loads((SERVE_REPORT / "report.json").read_text())
    return rep, {e["format"]: e for e in rep["data"]["plan"]["launch"]}


def test_every_serving_format_has_a_file_or_a_one_line_refusal(serve_launch):
    _, by_format = serve_launch
    _files_or_refusals(by_format, "plan infer")
    assert {"vllm", "sglang"} <= {f for f, e in by_format.items() if "files" in e}
    md = (SERVE_REPORT / "report.md").read_text()
    _shown(md, by_format)
    assert "plan infer --emit" in md


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "trtllm"])
def test_a_serving_reports_file_is_what_plan_infer_emits(capsys, serve_launch, fmt):
    """The same question asked of plan infer --emit: the same file (header line aside), or
    the same one-line refusal."""
    _, by_format = serve_launch
    rc, out, err = run(capsys, "plan", "infer", *SERVE_ASK, "--emit", fmt)
    e = by_format[fmt]
    if "refused" in e:
        assert rc == 2 and e["refused"] in err
    else:
        assert rc == 0, err
        assert _body(out) == _body(e["files"][e["main"]])


def test_a_serving_reports_vllm_line_reads_back_to_its_plan(capsys, serve_launch, tmp_path):
    """plan infer --from-config reads the report's vllm line (txcalc.emit.read.read_vllm)
    back to the report's layout and engine settings."""
    rep, by_format = serve_launch
    e = by_format["vllm"]
    path = tmp_path / "serve.sh"
    path.write_text(e["files"][e["main"]])
    back = run_json(capsys, "plan", "infer", "llama-3.1-70b", "--gpu", "h200", "--concurrency",
                    "16", "--from-config", str(path))
    best, req = rep["data"]["plan"]["best"], rep["data"]["request"]
    assert (back["tp"], back["pp"], back["replicas"]) == (best["tp"], best["pp"],
                                                          best["replicas"])
    kv = back["kv_capacity"]
    assert kv["max_model_len"] == req["context"] == back["context"]
    words = flags(e["files"][e["main"]], "llama-3.1-70b")
    assert int(words["--max-num-batched-tokens"]) == kv["max_num_batched_tokens"]
    assert int(words["--max-num-seqs"]) == kv["max_num_seqs"]
    assert float(words["--gpu-memory-utilization"]) == kv["gpu_memory_utilization"]
    assert int(words["--block-size"]) == kv["block_size"]


def test_a_serving_report_on_a_gpu_without_bf16_serves_what_plan_infer_does(capsys):
    """On a V100 the report's defaults (txcalc report: fp16-mixed, and then an fp16 KV cache)
    are plan infer's (fp16 weights and KV cache): the same vllm line, header aside."""
    from txcalc.report.model import build_report
    from txcalc.report.request import ReportRequest
    rep = build_report(ReportRequest(model="llama-3-8b", inference=True, gpu="v100",
                                     context=2048, precision="fp16-mixed", kv_dtype="fp16"))
    e = {e["format"]: e for e in rep["data"]["plan"]["launch"]}["vllm"]
    rc, out, err = run(capsys, "plan", "infer", "llama-3-8b", "--gpu", "v100", "--context",
                       "2k", "--emit", "vllm")
    assert rc == 0, err
    assert "--dtype float16" in out and _body(out) == _body(e["files"]["serve.sh"])


def test_a_serving_report_with_engine_trtllm_gives_trtllms_files(capsys):
    """--engine trtllm (TRT-LLM's KV rule, plan infer's --engine): the report's trtllm line
    and extra options YAML are plan infer --emit trtllm's, and vLLM's line is refused."""
    from txcalc.report.model import build_report
    from txcalc.report.request import ReportRequest
    rep = build_report(ReportRequest(model="llama-3-8b", inference=True, gpu="h100",
                                     context=4096, concurrency=8, engine="trtllm"))
    by_format = {e["format"]: e for e in rep["data"]["plan"]["launch"]}
    assert "engine trtllm" in by_format["vllm"]["refused"]
    rc, out, err = run(capsys, "plan", "infer", "llama-3-8b", "--gpu", "h100", "--context",
                       "4k", "--concurrency", "8", "--engine", "trtllm", "--emit", "trtllm")
    assert rc == 0, err
    files = by_format["trtllm"]["files"]
    assert set(files) == {"serve.sh", "extra_llm_api_options.yaml"}
    # plan infer prints both files, each under a '==> name <==' line (emit.rendered)
    printed = dict(zip(re.findall(r"==> (\S+) <==\n", out), re.split(r"==> \S+ <==\n", out)[1:]))
    assert {k: _body(v) for k, v in printed.items()} == {k: _body(v) for k, v in files.items()}
