"""The public library API (every function and class the README shows) refuses wrong types and
out-of-range values with a TxcalcError subclass naming the argument, never an AttributeError,
TypeError or a silently wrong number from deep inside.

``API`` lists each public callable with a valid call and, per argument, bad values; each bad
value replaces the valid one in turn. ``test_readme_api_is_covered`` reads the README's Python
block so that a function added there without a row here fails.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

import txcalc
from txcalc import TxcalcError
from txcalc.engine.accounting import count_flops, count_params
from txcalc.engine.kvcache import kv_cache_bytes, kv_cache_bytes_per_token
from txcalc.engine.memory import TrainingMemory, model_states
from txcalc.parallel.overheads import Overheads
from txcalc.serve.infer import plan_infer
from txcalc.train.planner import plan_train
from txcalc.engine.workload import Workload

CFG = txcalc.load("gpt2")
WORK = Workload(batch=1, seq=128)
NAN, INF = math.nan, math.inf
#: bad values for any count argument (sizes, lengths, numbers of GPUs)
BAD_COUNT = [None, "x", "80B", 1.5, True, -5, 0, 10**30, NAN, INF, [], object()]
BAD_REAL = ["x", True, -1.0, NAN, INF, -INF, 10**400, [], object()]
BAD_CHOICE = [None, "nope", 3, ["bf16"], True]
BAD_MODEL = [None, 3, 1.5, ["gpt2"], b"gpt2", "a\0b.json", "", "x" * 5000, "a/" + "b" * 300,
             object()]
BAD_CFG = [None, "gpt2", 3, {}, object()]
BAD_WORK = [None, "w", (1, 128), {"batch": 1}]


def _table(plan):
    return plan.table


def _replace(**kw):
    return CFG.replace(**kw)


def _decode(context):
    return count_flops(CFG, WORK).decode(context)


def _planned_table(n):
    return _TRAIN_PLAN().table(n)


_PLAN = []


def _TRAIN_PLAN():
    if not _PLAN:
        _PLAN.append(plan_train(txcalc.load(CFG), "h100", 10**9, gpus=1))
    return _PLAN[0]


#: (name, function, valid positional/keyword arguments, {argument: bad values})
API = [
    ("txcalc.load", txcalc.load, {"model": "gpt2"}, {"model": BAD_MODEL}),
    ("txcalc.params", txcalc.params, {"model": "gpt2"}, {"model": BAD_MODEL}),
    ("count_params", count_params, {"cfg": CFG}, {"cfg": BAD_CFG}),
    ("count_flops", count_flops, {"cfg": CFG, "work": WORK}, {"cfg": BAD_CFG, "work": BAD_WORK}),
    ("FlopCounts.decode", _decode, {"context": 1024}, {"context": BAD_COUNT}),
    ("Workload", Workload, {"batch": 1, "seq": 128, "src_seq": 0, "attn_impl": "eager",
                            "recompute": "none", "dropout": False},
     {"batch": BAD_COUNT, "seq": BAD_COUNT, "src_seq": [None, "x", -1, 1.5, 10**30, True],
      "attn_impl": BAD_CHOICE, "recompute": BAD_CHOICE, "dropout": [None, "yes", 1]}),
    ("TrainingMemory", TrainingMemory, {"cfg": CFG, "work": WORK, "precision": "bf16-mixed",
                                        "optimizer": "adamw"},
     {"cfg": BAD_CFG, "work": BAD_WORK, "precision": BAD_CHOICE, "optimizer": BAD_CHOICE}),
    ("model_states", model_states, {"n_params": 80 * 10**9, "precision": "fp16-mixed",
                                    "optimizer": "adam"},
     {"n_params": BAD_COUNT, "precision": BAD_CHOICE, "optimizer": BAD_CHOICE + ["adafactor"]}),
    ("kv_cache_bytes", kv_cache_bytes, {"cfg": CFG, "context": 1024, "batch": 1,
                                        "kv_dtype": "bf16", "window": True, "src_seq": 0},
     {"cfg": BAD_CFG, "context": BAD_COUNT, "batch": BAD_COUNT, "kv_dtype": BAD_CHOICE,
      "window": [None, "yes"], "src_seq": [None, -5, 1.5, "x", 10**30]}),
    ("kv_cache_bytes_per_token", kv_cache_bytes_per_token, {"cfg": CFG, "kv_dtype": "bf16"},
     {"cfg": BAD_CFG, "kv_dtype": BAD_CHOICE}),
    ("ModelConfig.replace", _replace, {"d_model": 256},
     {"d_model": [None, "x", -1, 0, 1.5, True], "nope": [1], "n_heads": [0, "4"]}),
    ("plan_train", plan_train,
     {"model": CFG, "gpu": "h100", "tokens": 10**9, "seq": None, "global_batch": None,
      "days": None, "max_gpus": None, "gpus": None, "precision": "bf16-mixed",
      "optimizer": "adamw", "price_per_gpu_hour": None, "gpu_file": None, "profile": None,
      "overheads": None, "achieved_tflops": None, "attn_impl": "flash", "only": None,
      "n_rows": 10, "max_global_batch": None, "max_global_batch_tokens": None,
      "gpus_per_node": None},
     {"model": BAD_MODEL, "gpu": [None, 3, "", "h100\0", "nope-gpu", ["h100"]],
      "tokens": BAD_COUNT, "seq": BAD_COUNT[1:], "global_batch": BAD_COUNT[1:],
      "days": BAD_REAL + [0], "max_gpus": BAD_COUNT[1:], "gpus": BAD_COUNT[1:],
      "precision": BAD_CHOICE, "optimizer": BAD_CHOICE, "price_per_gpu_hour": BAD_REAL,
      "gpu_file": [3, "a\0b.csv", ""], "profile": ["p", 3], "overheads": ["o", 3],
      "achieved_tflops": BAD_REAL + [0, 1e-305], "attn_impl": BAD_CHOICE,
      "only": ["tp8", {"tq": 8}, {"tp": 0}, {"tp": "8"}, {"zero": 4}, {"recompute": "most"}],
      "n_rows": [0, -1, None, "5", 1.5, 10**9], "max_global_batch": BAD_COUNT[1:],
      "max_global_batch_tokens": BAD_COUNT[1:], "gpus_per_node": BAD_COUNT[1:]}),
    ("plan_infer", plan_infer,
     {"model": CFG, "gpu": "h100", "context": 1024, "concurrency": 1, "kv_dtype": "bf16",
      "tokens_per_s": None, "precision": "bf16", "gpu_file": None, "profile": None,
      "overheads": None},
     {"model": BAD_MODEL, "gpu": [None, 3, "", "nope-gpu"], "context": BAD_COUNT,
      "concurrency": BAD_COUNT, "kv_dtype": BAD_CHOICE, "tokens_per_s": BAD_REAL + [0],
      "precision": BAD_CHOICE, "gpu_file": [3, "a\0b.csv"], "profile": ["p"],
      "overheads": [1]}),
    ("TrainPlan.table", _planned_table, {"n": 3}, {"n": [0, -1, None, "3", 1.5, 10**9]}),
    ("Overheads.from_gib", Overheads.from_gib,
     {"cuda_context_gib": 1.0, "comm_buffer_gib": 0.5, "fragmentation": 0.05},
     {"cuda_context_gib": BAD_REAL, "comm_buffer_gib": BAD_REAL,
      "fragmentation": BAD_REAL + [1, 1.5]}),
]

CASES = [(name, fn, valid, arg, bad) for name, fn, valid, bads in API
         for arg, values in bads.items() for bad in values]


@pytest.mark.parametrize("name, fn, valid", [(n, f, v) for n, f, v, _ in API],
                         ids=[n for n, *_ in API])
def test_valid_call_works(name, fn, valid):
    fn(**valid)


def _short(v) -> str:
    return re.sub(r"\W+", "_", repr(v))[:20]


@pytest.mark.parametrize("name, fn, valid, arg, bad", CASES,
                         ids=[f"{n}-{a}-{_short(b)}" for n, _, _, a, b in CASES])
def test_bad_argument_raises_txcalc_error_naming_it(name, fn, valid, arg, bad):
    kwargs = dict(valid, **{arg: bad})
    with pytest.raises(TxcalcError) as e:
        fn(**kwargs)
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 600, msg
    # the argument is named (a GPU or preset name that is unknown is named by its value)
    assert arg in msg or (repr(bad)[:20] in msg) or arg in ("model", "gpu"), msg


@pytest.mark.parametrize("call, pattern", [
    (lambda: count_flops(CFG, None), r"work \(None\)"),
    (lambda: count_params("x"), r"cfg \('x'\) must be a ModelConfig"),
    (lambda: plan_infer(txcalc.load(CFG), "h100", None, 1), r"context \(None\)"),
    (lambda: model_states("80B"), r"n_params \('80B'\)"),
    (lambda: txcalc.load("a\0b.json"), r"model .*NUL"),
    (lambda: CFG.replace(nope=1), r"unknown ModelConfig field.*'nope'"),
    (lambda: kv_cache_bytes(CFG, -5), r"context \(-5\)"),
    (lambda: model_states(-5), r"n_params \(-5\)"),
    (lambda: plan_train(txcalc.load(CFG), "h100", 10**9, n_rows=0), r"n_rows \(0\)"),
])
def test_issue_10_library_examples(call, pattern):
    with pytest.raises(TxcalcError, match=pattern) as e:
        call()
    assert "no layout fits" not in str(e.value)


def test_valid_answers_unchanged():
    # the chapter's 80B model: 2 + 2 + 12 bytes per parameter
    assert model_states(80 * 10**9, "fp16-mixed", "adam")["total_bytes"] == 1280 * 10**9
    # gpt2: 12 layers x (k, v) x 768 x 2 bytes per token, bf16
    assert kv_cache_bytes(CFG, 1024) == 1024 * 2 * 12 * 768 * 2


def test_readme_api_is_covered():
    """Every name the README's Python block calls is in API (or is an attribute read)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = "\n".join(re.findall(r"```python\n(.*?)```", readme, re.S))
    called = set(re.findall(r"\b([A-Za-z_][\w.]*)\(", block))
    covered = {n for n, *_ in API} | {n.split(".")[-1] for n, *_ in API}
    # methods without arguments (no input to check) and builtins
    no_args = {"p.component_frame", "f.frame", "to_json", "plan.best.layout.short",
               "plan_infer(...).table", "table", "short", "component_frame", "frame",
               "plan.frontier_table", "frontier_table"}
    missing = sorted(c for c in called if c not in covered and c.split(".")[-1] not in
                     covered | no_args and c not in no_args)
    assert not missing, f"README functions without bad-input cases: {missing}"
    assert {"txcalc.load", "txcalc.params", "count_flops", "TrainingMemory", "Workload",
            "plan_train", "plan_infer"} <= called


NAME_TAKERS = [  # (module, function, the arguments after the model)
    ("txcalc.train.planner", "plan_train", ("h100", 10**12)),
    ("txcalc.serve.kv", "kv_capacity", ("h100",)),
    ("txcalc.serve.sim", "step_model", ("h100",)),
    ("txcalc.serve.plan", "plan_serving", ("h100", 100, 10)),
    ("txcalc.serve.cp", "cp_prefill", ("h100", 1000)),
    ("txcalc.serve.load", "serving_load_data", ("h100", 100, 10)),
    ("txcalc.serve.infer", "plan_infer", ("h100", 4096, 1)),
    ("txcalc.serve.infer", "trtllm_bench_settings", ("h100", 128, 128)),
    ("txcalc.serve.infer", "serve_throughput", ("h100", 128, 128)),
]


@pytest.mark.parametrize("module,name,args", NAME_TAKERS, ids=[n for _, n, _ in NAME_TAKERS])
def test_train_and_serve_take_a_config_not_a_name(module, name, args):
    """A name becomes a ModelConfig once, at the top (txcalc.load): below it a name is refused
    with one error naming the value and the way to get a config."""
    import importlib
    from txcalc.inputs import InputError
    f = getattr(importlib.import_module(module), name)
    kw = {"cp": 2} if name == "cp_prefill" else {"rate": 1.0} if name == "plan_serving" else {}
    with pytest.raises(InputError, match=r"model \('llama-3-8b'\) must be a ModelConfig, not "
                                         r"str \(txcalc\.load\(NAME_OR_PATH\) gives one\)"):
        f("llama-3-8b", *args, **kw)


def test_a_serving_answer_looks_its_gpu_up_once(monkeypatch):
    """serve.setting.ServeSetting: the GPU name is resolved once per answer, then the catalog
    row travels down (a layout search calls get_gpu with a Gpu only)."""
    from txcalc.engine import hardware
    from txcalc.serve.infer import plan_infer, serve_throughput
    from txcalc.serve.plan import plan_serving
    real, names = hardware.get_gpu, []

    def counting(name, extra=None):
        if not isinstance(name, hardware.Gpu):
            names.append(name)
        return real(name, extra)
    import importlib
    import sys
    for name in ("cp", "kv", "load", "sim", "disagg", "setting"):  # every serving module
        importlib.import_module(f"txcalc.serve.{name}")
    for mod in [m for name, m in sys.modules.items() if name.startswith("txcalc.")]:
        if getattr(mod, "get_gpu", None) is real:  # a module-level import counts too
            monkeypatch.setattr(mod, "get_gpu", counting)
    cfg = txcalc.load("llama-3.2-1b")
    plan_infer(cfg, "h100", 4096, 8)
    assert names == ["h100"]
    names.clear()
    serve_throughput(cfg, "h100", 128, 128)
    assert names == ["h100"]
    names.clear()
    plan_serving(cfg, "h100", 200, 20, concurrency=4, replicas=1)
    assert names == ["h100"]
