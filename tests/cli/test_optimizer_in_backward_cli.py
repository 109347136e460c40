"""torchtune's full fine-tune as `txcalc memory` and `fit` answer it (issue 28):
``--recipe torchtune`` with full fine-tuning takes its 8B_full_single_device config (bf16,
bitsandbytes PagedAdamW8bit, optimizer_in_bwd) and says so; --optimizer paged-adam8bit and
--optimizer-in-backward on their own; the published row is what the CLI answers; bad
combinations are refused in one line."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from txcalc.cli import app

RUNNER = CliRunner()
FULL = ["llama-3.1-8b", "--recipe", "torchtune", "--gpu", "rtx-4090"]


def _json(argv):
    r = RUNNER.invoke(app, [*argv, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_torchtune_full_8b_fits_a_4090_at_2048_stating_its_config():
    """torchtune's README runs it on one 4090 at batch 2 x 2048 (18.9 GiB): fit agrees,
    with the paged states beyond the largest tensor's left to the host."""
    out = _json(["fit", *FULL, "--seq", "2048"])
    assert out["fits"] and out["max_batch"] >= 2
    assert _json(["fit", *FULL, "--batch", "2"])["max_seq"] >= 2048
    assert (out["precision"], out["optimizer"], out["optimizer_in_backward"],
            out["loss"], out["recompute"]) == ("bf16", "paged-adam8bit", True, "chunked:8",
                                               "full")
    said = " ".join(out["assumed"])
    assert "recipe torchtune (full fine-tune)" in said and "PagedAdamW8bit" in said
    assert "optimizer in backward" in said and "precision bf16 (the recipe's dtype" in said
    assert out["paged_optimizer_bytes"] > 14 * 2**30 and "paged" in out["compared_as"]
    # what is compared: reserved + context + the largest tensor's paged states
    assert out["compared_bytes"] == out["reserved_bytes"] + out["cuda_context_bytes"] + \
        out["paged_working_bytes"]
    text = " ".join(RUNNER.invoke(app, ["fit", *FULL, "--seq", "2048"]).output.split())
    assert "paged-adam8bit in backward" in text and "fits at batch" in text


def test_memory_answers_the_published_row_and_the_options_undo_the_recipe():
    from txcalc.train.finetune_runs import load_measurements, predict
    m = next(r for r in load_measurements() if r.id == "torchtune-llama-3.1-8b-full-4090")
    out = _json(["memory", *FULL, "--batch", "2", "--seq", "2048"])
    # the row ran compiled (its blocks and its loss): --compile answers it exactly
    comp = _json(["memory", *FULL, "--batch", "2", "--seq", "2048", "--compile"])
    pred = predict(m)
    assert comp["total_bytes"] == pred["tensor_bytes"] != out["total_bytes"]
    assert comp["fused"] == ["layers", "loss"] and out["fused"] == []
    for k in ("allocated_bytes", "reserved_bytes", "device_bytes"):
        assert comp[k] == pred[k], k
    # without it, the same row uncompiled
    pred = predict(dataclasses.replace(m, compiled_loss=False, compiled_layers=False))
    assert out["total_bytes"] == pred["tensor_bytes"]
    for k in ("allocated_bytes", "reserved_bytes", "device_bytes"):
        assert out[k] == pred[k], k
    assert out["gradients_bytes"] > 14 * 2**30 and out["peak_by_category"]["grad"] == 0
    assert out["device_bytes"] - out["reserved_bytes"] - out["cuda_context_bytes"] == \
        out["paged_optimizer_bytes"]
    # after backward: every gradient held until the step
    after = _json(["memory", *FULL, "--batch", "2", "--seq", "2048",
                   "--no-optimizer-in-backward"])
    assert not after["optimizer_in_backward"]
    assert after["total_bytes"] - out["total_bytes"] > 10 * 2**30
    # the states in the allocator (bitsandbytes' AdamW8bit): all of them in reserved
    unpaged = _json(["memory", *FULL, "--batch", "2", "--seq", "2048", "--optimizer",
                     "adam8bit"])
    assert unpaged["paged_optimizer_bytes"] == 0
    assert unpaged["total_bytes"] - out["total_bytes"] == out["paged_optimizer_bytes"]


def test_the_options_work_without_a_recipe():
    base = ["memory", "llama-3.2-1b", "--seq", "512", "--precision", "bf16"]
    plain, inbwd = _json(base), _json([*base, "--optimizer-in-backward"])
    assert inbwd["optimizer_in_backward"] and inbwd["total_bytes"] < plain["total_bytes"]
    assert inbwd["peak_by_category"]["grad"] < plain["gradients_bytes"] // 4
    paged = _json([*base, "--optimizer", "paged-adam8bit"])
    assert paged["paged_optimizer_bytes"] > 0 and paged["need_bytes"] < paged["device_bytes"]


@pytest.mark.parametrize("argv,words", [
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--optimizer-in-backward"],
     "modelled on one GPU, not --gpus 2"),
    (["memory", "llama-3.2-1b", "--optimizer-in-backward", "--offload", "optimizer"],
     "not with --optimizer adamw and --offload optimizer"),
    (["memory", "llama-3.2-1b", "--optimizer-in-backward", "--optimizer", "none"],
     "not with --optimizer none"),
    (["memory", "llama-3.2-1b", "--recipe", "hf-peft"],
     "--recipe hf-peft declares no full fine-tune config"),
    (["memory", "--params", "7B", "--optimizer-in-backward"], "needs a training step"),
])
def test_bad_combinations_are_refused_in_one_line(argv, words):
    # exit 2, one line on stderr, no traceback
    from .test_loss_flags import _one_line_exit_2
    _one_line_exit_2(argv, words)
