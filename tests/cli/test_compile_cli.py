"""--compile on memory and fit: the model under torch.compile (each block compiled whole, the
recipe's loss too where it compiles it: engine.recipes.Recipe.compiled). What a compiled block
keeps is proven against the reference model compiled on CPU
(tests/conformance/test_stacks_recompute.py); here: the options reach the engine, say what they
assumed, and refuse what they cannot apply."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from txcalc.cli import app

RUNNER = CliRunner()
BASE = ["memory", "llama-3.2-1b", "--seq", "512", "--recompute", "none"]


def _json(argv):
    r = RUNNER.invoke(app, [*argv, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_compile_fuses_the_blocks_and_says_so():
    plain, comp = _json(BASE), _json([*BASE, "--compile"])
    assert plain["fused"] == [] and comp["fused"] == ["layers"]
    # the blocks' norms keep their input and 1/rms, the gated products gate and up: less saved
    assert comp["activations_bytes"] < plain["activations_bytes"]
    assert comp["weights_bytes"] == plain["weights_bytes"]
    said = " ".join(comp["assumed"])
    assert "torch.compile (--compile): each block compiled whole" in said
    assert "the loss" not in said and "torch.compile" not in " ".join(plain["assumed"])


def test_torchtune_compiles_its_loss_too():
    argv = ["memory", "llama-3.2-1b", "--seq", "2048", "--finetune", "lora", "--recipe",
            "torchtune", "--compile"]
    out = _json(argv)
    assert out["fused"] == ["layers", "loss"] and out["recipe"]["compiled"] == ["layers", "loss"]
    assert "and the loss (the recipe's compile_loss)" in " ".join(out["assumed"])
    # hf-peft compiles the blocks only
    hf = _json(["memory", "llama-3.2-1b", "--seq", "2048", "--finetune", "lora", "--compile"])
    assert hf["fused"] == ["layers"]


def test_fit_with_compile_fits_at_least_as_long():
    argv = ["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--finetune", "lora", "--recipe",
            "torchtune", "--batch", "2"]
    plain, comp = _json(argv), _json([*argv, "--compile"])
    assert comp["max_seq"] > plain["max_seq"]
    assert any("--compile" in a for a in comp["assumed"])
    assert not any("--compile" in a for a in plain["assumed"])


def test_compile_without_a_training_step_is_refused_in_one_line():
    from .test_loss_flags import _one_line_exit_2
    for argv in (["memory", "--params", "8e9", "--compile"],
                 ["memory", "llama-3.2-1b", "--inference", "--compile"]):
        _one_line_exit_2(argv, "--compile needs a training step of MODEL")


def test_an_emitted_config_refuses_a_compiled_plan():
    """The HF-Trainer formats do not compile each block on its own: a plan made with
    --compile would promise them lengths their runs do not reach."""
    from .test_loss_flags import _one_line_exit_2
    argv = ["fit", "llama-3.2-1b", "--gpu", "rtx-4090", "--finetune", "lora", "--recipe",
            "trl-sft", "--emit", "trl"]
    out = _json(argv[:-2])
    assert out["fused"] == []
    assert _json([*argv[:-2], "--compile"])["fused"] == ["layers"]
    _one_line_exit_2([*argv, "--compile"], "--emit trl: --compile: the plan modelled each "
                                           "block compiled on its own")
