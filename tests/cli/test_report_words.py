"""Reports for people (issue 18 item 6): layout names in words, serving without training
boilerplate, the serving memory the planner reserves, prefill compute stated both ways, the
simpler ZeRO stage on ties, no empty sections, what the validation validated."""

import json
import re
from pathlib import Path

import pytest

import txcalc
from txcalc.serve.infer import plan_infer
from txcalc.train.planner import plan_train
from txcalc.report.planning import layout_in_words

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def _rep(name):
    return json.loads((REPORTS / name / "report.json").read_text())


def _md(name):
    return (REPORTS / name / "report.md").read_text()


@pytest.mark.parametrize("short", ["tp8 pp16 dp32 cp4 z2 sp v4 mb1", "tp1 pp1 dp1 z0 mb16",
                                   "tp2 pp4 dp8 ep8 z3h mb2 sel", "tp4 pp1 dp2 z1 mb1 full"])
def test_every_layout_token_is_put_in_words(short):
    words = layout_in_words(short)
    assert not re.search(r"\b(tp|pp|dp|cp|ep|z|v|mb)\d+h?\b|\bsel\b", words), words
    for n in re.findall(r"(?:tp|pp|dp|cp|ep|v|mb)(\d+)", short):
        assert n == "1" or n in words


def test_planned_layouts_in_the_answer_are_explained():
    for name in ("llama-3.1-405b-train-h100", "mixtral-8x7b-train-h100", "t5-base-finetune-1gpu"):
        rep = _rep(name)
        layout = rep["data"]["plan"]["best"]["layout"]
        answer = " ".join(rep["sections"][0]["paragraphs"])
        assert f"The layout `{layout}` in words: {layout_in_words(layout)}." in answer


def test_serving_report_has_no_training_boilerplate():
    md = _md("llama-3.1-70b-serve-h200-128k")
    for training in ("optimizer adamw", "Adam: 2 + 2 + 12", "Recompute:", "saved_tensors_hooks"):
        assert training not in md
    assert "Adam: 2 + 2 + 12" in _md("llama-3.1-405b-train-h100")


def test_serving_memory_shows_what_the_planner_reserves():
    rep = _rep("llama-3.1-70b-serve-h200-128k")
    gpu = rep["data"]["gpu"]["usable_bytes"]  # CUDA's total, the planner's capacity
    for m in rep["data"]["memory"]:
        assert set(m["categories"]) == {"weights", "kv cache", "prefill workspace", "framework"}
        assert m["categories"]["prefill workspace"] > 0 and m["categories"]["framework"] > 0
        assert m["total"] == sum(m["categories"].values()) <= gpu
    # the categories are the planner's budget: the most sequences it allows fit, one more not
    p = plan_infer(txcalc.load("llama-3.1-70b"), "h200", 131072, 16)
    for r in p.rows:
        most = r.max_concurrency_per_replica
        assert sum(r.memory_at(most).values()) <= p.gpu.usable_bytes
        assert sum(r.memory_at(most + 1).values()) > p.gpu.usable_bytes - 2  # int rounding


def test_serving_prefill_compute_is_stated_masked_and_full():
    rep = _rep("llama-3.1-70b-serve-h200-128k")
    fl = rep["data"]["flops"]
    from txcalc.engine.accounting import count_flops
    from txcalc.engine.workload import Workload
    f = count_flops(txcalc.load("llama-3.1-70b"), Workload(batch=1, seq=131072))
    assert (fl["prefill_per_sequence"], fl["prefill_model_per_sequence"]) == (
        f.prefill(), f.prefill(model=True))
    answer = " ".join(rep["sections"][0]["paragraphs"])
    assert "40.46 PFLOP with the causally masked half" in answer
    assert "62.98 PFLOP over the full S x S" in answer


def test_t5_on_one_gpu_gets_zero_stage_0_not_3():
    rep = _rep("t5-base-finetune-1gpu")
    assert rep["data"]["plan"]["best"]["layout"] == "tp1 pp1 dp1 z0 mb16"
    # ties (same memory, same time) go to the simpler stage in the planner itself
    p = plan_train(txcalc.load("t5-base"), "a100-40gb", 10**9, max_gpus=1, seq=512, global_batch=32,
                   attn_impl="eager")
    same = [r for r in p.rows if r.days == p.best.days and r.total_bytes == p.best.total_bytes]
    assert [r.layout.zero for r in same] == sorted(r.layout.zero for r in same)


def test_no_empty_sections():
    for name in ("80b-why-distributed", "llama-3.1-405b-train-h100",
                 "llama-3.1-70b-serve-h200-128k", "mixtral-8x7b-train-h100",
                 "t5-base-finetune-1gpu"):
        md = _md(name)
        assert "Not available" not in md and "Only a parameter count was given" not in md
    ids = [s["id"] for s in _rep("80b-why-distributed")["sections"]]
    assert ids == ["answer", "memory", "assumptions", "provenance"]


def test_validation_section_says_what_was_and_was_not_validated():
    md = _md("llama-3.1-405b-train-h100")
    assert ("What this validates: parameter counts, FLOP counts, bytes saved for backward. "
            "What it does not: step and kernel times") in md
    assert "the GPU memory a real run allocates" in md
