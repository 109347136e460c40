"""The answer layer (txcalc.answers): each answer function's ``json`` is what its command's
``--json`` prints for the same options (typer's CliRunner), the page's API returns the same
dict in-process, the engine gets a ModelConfig read once, and no answer prints."""

from __future__ import annotations

import json
import urllib.request
from urllib.parse import urlencode

import pytest
from typer.testing import CliRunner

from txcalc import answers
from txcalc.cli import app
from txcalc.web import calc

RUNNER = CliRunner()

#: (answer function, its keyword arguments, the same options as the command's argv)
CASES = [
    ("presets", {}, ["presets"]),
    ("params", {"model": "llama-3-8b"}, ["params", "llama-3-8b"]),
    ("params", {"model": "llama-3.1-70b", "weights": "awq-int4-g128"},
     ["params", "llama-3.1-70b", "--weights", "awq-int4-g128"]),
    ("flops", {"model": "llama-3-8b", "batch": 2, "seq": 4096, "context": "8k"},
     ["flops", "llama-3-8b", "--batch", "2", "--seq", "4096", "--context", "8k"]),
    ("flops", {"model": "llama-2-7b", "finetune": "dora", "seq": 2048},
     ["flops", "llama-2-7b", "--finetune", "dora", "--seq", "2048"]),
    ("memory", {"model": "llama-3-8b", "seq": 4096, "recompute": "selective"},
     ["memory", "llama-3-8b", "--seq", "4096", "--recompute", "selective"]),
    ("memory", {"model": "llama-3.1-70b", "inference": True, "context": "128k",
                "concurrency": 8, "kv_dtype": "fp8"},
     ["memory", "llama-3.1-70b", "--inference", "--context", "128k", "--concurrency", "8",
      "--kv-dtype", "fp8"]),
    ("memory", {"params": "80e9", "precision": "fp16-mixed", "optimizer": "adam"},
     ["memory", "--params", "80e9", "--precision", "fp16-mixed", "--optimizer", "adam"]),
    ("memory", {"model": "llama-2-7b", "finetune": "lora", "lora_rank": 8,
                "lora_targets": "q_proj,v_proj", "gpu": "rtx-4090"},
     ["memory", "llama-2-7b", "--finetune", "lora", "--lora-rank", "8", "--lora-targets",
      "q_proj,v_proj", "--gpu", "rtx-4090"]),
    ("fit", {"model": "llama-3.1-8b", "gpu": "rtx-4090", "finetune": "qlora"},
     ["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--finetune", "qlora"]),
    ("fit", {"model": "llama-3.1-8b", "gpu_gb": 24.0, "seq": 4096},
     ["fit", "llama-3.1-8b", "--gpu-gb", "24", "--seq", "4096"]),
    ("fit", {"model": "llama-3.1-8b", "gpu": "rtx-4090", "finetune": "qlora",
             "recipe": "torchtune", "safety": 1.5},
     ["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--finetune", "qlora", "--recipe",
      "torchtune", "--safety", "1.5"]),
    ("memory", {"model": "llama-3.2-1b", "finetune": "qlora", "recipe": "unsloth"},
     ["memory", "llama-3.2-1b", "--finetune", "qlora", "--recipe", "unsloth"]),
    ("plan_train", {"model": "llama-3-8b", "tokens": "1T", "gpu": "a100", "max_gpus": 64,
                    "seq": 8192},
     ["plan", "train", "llama-3-8b", "--tokens", "1T", "--gpu", "a100", "--max-gpus", "64",
      "--seq", "8192"]),
    ("plan_infer", {"model": "llama-3.1-70b", "gpu": "h200", "context": "32k",
                    "concurrency": 64, "kv_dtype": "fp8"},
     ["plan", "infer", "llama-3.1-70b", "--gpu", "h200", "--context", "32k",
      "--concurrency", "64", "--kv-dtype", "fp8"]),
    ("plan_infer", {"model": "llama-3.1-8b", "gpu": "h100", "input_len": "1024",
                    "output_len": "256", "rate": "inf"},
     ["plan", "infer", "llama-3.1-8b", "--gpu", "h100", "--input-len", "1024",
      "--output-len", "256", "--rate", "inf"]),
    ("plan_infer", {"model": "llama-3.1-8b", "gpu": "h100", "input_len": "1024",
                    "output_len": "256", "concurrency": 4},
     ["plan", "infer", "llama-3.1-8b", "--gpu", "h100", "--input-len", "1024",
      "--output-len", "256", "--concurrency", "4"]),
]


def cli_json(argv: list[str]) -> dict:
    r = RUNNER.invoke(app, [*argv, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("name, kw, argv", CASES, ids=lambda x: x if isinstance(x, str) else
                         None)
def test_each_answer_is_its_commands_json(name, kw, argv, capsys):
    got = answers.get(name)(**kw)
    assert capsys.readouterr() == ("", "")  # library code never prints
    assert got.json == cli_json(argv)
    # the JSON text the command prints, key order included
    assert answers.json_text(got.json, indent=2) + "\n" == RUNNER.invoke(
        app, [*argv, "--json"]).stdout


def test_different_options_give_different_answers():
    """The comparison above can fail: another option is another answer."""
    a = answers.memory("llama-3-8b", seq=4096).json
    assert a != cli_json(["memory", "llama-3-8b", "--seq", "2048"])
    assert a == cli_json(["memory", "llama-3-8b", "--seq", "4096"])


def test_a_refused_option_is_the_commands_one_line():
    from txcalc.errors import TxcalcError
    with pytest.raises(TxcalcError) as e:
        answers.memory("llama-3-8b", seq=0)
    r = RUNNER.invoke(app, ["memory", "llama-3-8b", "--seq", "0", "--json"])
    assert r.exit_code != 0 and str(e.value) == str(r.exception)


def test_the_model_is_read_once_and_the_engine_gets_a_modelconfig(monkeypatch):
    import txcalc
    import txcalc.serve.infer
    import txcalc.train.planner
    from txcalc.model.config import ModelConfig

    names, given = [], []
    real_load = txcalc.load

    def load(model, *a, **k):
        if isinstance(model, str):
            names.append(model)
        return real_load(model, *a, **k)

    def spy(real):
        def wrapped(model, gpu, *a, **k):
            given.append((type(model), type(gpu).__name__))
            return real(model, gpu, *a, **k)
        return wrapped

    monkeypatch.setattr(txcalc, "load", load)
    monkeypatch.setattr(txcalc.train.planner, "plan_train",
                        spy(txcalc.train.planner.plan_train))
    monkeypatch.setattr(txcalc.serve.infer, "plan_infer", spy(txcalc.serve.infer.plan_infer))
    answers.plan_train("llama-3-8b", tokens="1T", gpu="h100", gpus=8)
    answers.plan_infer("llama-3.1-8b", gpu="h100", context="8k", concurrency=4)
    assert given == [(ModelConfig, "Gpu"), (ModelConfig, "Gpu")]
    assert names == ["llama-3-8b", "llama-3.1-8b"]


# --- the page (the server fixture: tests/cli/conftest.py) ----------------------------------------
FORMS = [
    {"model": "llama-3.1-8b", "seq": "2048", "tokens": "100B", "gpu": "h100"},
    {"model": "gpt2", "task": "finetune", "finetune": "qlora", "seq": "512"},
    {"model": "llama-3.1-8b", "task": "serve", "concurrency": "4"},
]


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.get("task", "train"))
def test_the_pages_panels_are_the_answer_functions(server, form):
    for panel, argv in calc.commands(calc.form_of(form)).items():
        fn, kw = calc.call_of(argv)
        with urllib.request.urlopen(f"{server.url}api/{panel}?{urlencode(form)}",
                                    timeout=120) as r:
            body = r.read()
        assert json.loads(body) == fn(**kw).json, panel
        assert body.decode() == RUNNER.invoke(app, [*argv, "--json"]).stdout, panel


def test_a_panels_argv_becomes_its_answers_arguments():
    fn, kw = calc.call_of(["memory", "gpt2", "--inference", "--context", "1124",
                           "--concurrency", "8", "--kv-dtype", "bf16", "--gpu", "h200"])
    assert fn is answers.memory
    assert kw == {"model": "gpt2", "inference": True, "context": "1124", "concurrency": 8,
                  "kv_dtype": "bf16", "gpu": "h200"}
    fn, kw = calc.call_of(["plan", "train", "gpt2", "--tokens", "1T", "--price", "2"])
    assert fn is answers.plan_train and kw["price"] == 2.0
    with pytest.raises(calc.CommandFailed, match="'abc' is not a valid integer"):
        calc.call_of(["memory", "gpt2", "--batch", "abc"])
    with pytest.raises(RuntimeError, match="no option of memory"):
        calc.call_of(["memory", "gpt2", "--sequence", "1"])
