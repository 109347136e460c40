"""Practitioner defaults when fine-tuning (issue 28): gradient checkpointing unless asked
otherwise, and every answer lists the defaults it assumed."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from txcalc.cli import app

RUNNER = CliRunner()
ASK = ["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--finetune", "qlora", "--seq", "4096"]


def _json(argv):
    r = RUNNER.invoke(app, [*argv, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_qlora_8b_fits_a_4090_at_4k_with_checkpointing_assumed():
    out = _json(ASK)
    assert out["fits"] and out["recompute"] == "full" and out["max_batch"] >= 1
    assert any("gradient checkpointing" in a for a in out["assumed"])
    assert any(a.startswith("recipe hf-peft") for a in out["assumed"])
    assert out["recipe"]["name"] == "hf-peft" and out["recipe"]["upcast_fp32"]
    text = " ".join(RUNNER.invoke(app, ASK).output.split())
    assert "fits at batch" in text and "Assumed: recompute full" in text
    assert "Assumed: recipe hf-peft" in text


def test_recompute_none_still_answers_for_none():
    out = _json([*ASK, "--recompute", "none"])
    assert out["recompute"] == "none" and not out["fits"]
    assert not any(a.startswith("recompute") for a in out["assumed"])


def test_memory_and_flops_checkpoint_when_fine_tuning_only():
    lora = ["llama-3.2-1b", "--seq", "1024", "--finetune", "lora"]
    assert _json(["memory", *lora])["recompute"] == "full"
    assert _json(["memory", *lora, "--recompute", "none"])["recompute"] == "none"
    full = _json(["memory", "llama-3.2-1b", "--seq", "1024"])
    assert full["recompute"] == "none" and full["assumed"] == []
    assert _json(["flops", *lora])["recompute_flops"] > 0
    assert _json(["flops", *lora, "--recompute", "none"])["recompute_flops"] == 0
