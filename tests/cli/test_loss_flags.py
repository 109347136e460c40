"""``--loss full | chunked[:N] | fused-linear`` on every command that takes the fine-tuning
flags (issue 14, item 6: "The planner and reports take the same flags"): ``fit``, ``plan
train`` and ``report`` answer with the figures of ``memory --json`` for the same setup on one
GPU, and a malformed loss, or one the model's head cannot run, exits 2 with one line.

The memory command's figures are themselves checked against the reference (MemTracker,
saved_tensors_hooks, FlopCounterMode) in tests/conformance/test_finetune_loss.py; here each other command
must give the same number, not a second formula for it.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import txcalc
from txcalc.cli import app

LOSSES = ["full", "chunked:4", "chunked", "fused-linear"]
MODEL = "llama-3.2-1b"  # V = 128,256: at 1k tokens the logits are a large part of the peak
LORA = ["--finetune", "lora", "--lora-rank", "8"]


def _json(argv):
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _memory(loss, batch=2, seq=1024, extra=()):
    return _json(["memory", MODEL, "--batch", str(batch), "--seq", str(seq), "--loss", loss,
                  "--recompute", "none", *LORA, *extra, "--json"])


def test_the_losses_differ():
    """The loss reaches the figures compared below (else the equalities could not fail)."""
    mem = {loss: _memory(loss) for loss in LOSSES}
    assert len({m["total_bytes"] for m in mem.values()}) == len(LOSSES)
    assert len({m["logits_bytes"] for m in mem.values()}) == len(LOSSES)
    assert all(m["loss"] == loss for loss, m in mem.items())


@pytest.mark.parametrize("loss", LOSSES)
def test_plan_train_one_gpu_equals_memory(loss, big_gpu):
    """``plan train --gpus 1 --zero 0`` (pinned micro-batch and recompute): every category
    the planner books equals memory --json's, the logits gradient of the loss included
    (both from txcalc.engine.lm_loss.logits_grad_bytes)."""
    mem = _memory(loss)
    plan = _json(["plan", "train", MODEL, "--gpu", "big", "--gpu-file", big_gpu, "--gpus", "1",
                  "--zero", "0", "--micro-batch", "2", "--recompute", "none", "--seq", "1024",
                  "--tokens", "2048", "--loss", loss, *LORA, "--json"])
    assert plan["loss"] == loss
    best = plan["best"]["memory_bytes"]
    for k in ("weights", "gradients", "optimizer", "activations", "logits"):
        assert best[k] == mem[f"{k}_bytes"], k


@pytest.mark.parametrize("loss", LOSSES)
def test_fit_answer_equals_memory(loss):
    """``fit --batch 2``: the longest sequence is one whose memory --json total (with fit's
    CUDA context and allocator slack) fits the GPU and one token more does not; the answer's
    bytes are that total's."""
    gpu_gb = 12
    out = _json(["fit", MODEL, "--gpu-gb", str(gpu_gb), "--batch", "2", "--loss", loss, *LORA,
                 "--recompute", "none", "--json"])
    assert out["fits"] and out["loss"] == loss
    need = {s: _memory(loss, 2, s, ("--gpu-gb", str(gpu_gb)))["device_bytes"]
            for s in (out["max_seq"], out["max_seq"] + 1)}
    assert out["total_bytes"] == need[out["max_seq"]] <= gpu_gb * 10**9 < need[out["max_seq"] + 1]


def test_fit_suggests_the_fused_loss_first_among_the_costly_changes():
    """At a long context the fused linear cross-entropy is the first change after fused
    attention: it costs no FLOPs (step-time factor 1), recompute does; its bytes are memory's."""
    out = _json(["fit", MODEL, "--gpu-gb", "8", "--seq", "32768", "--attn", "eager", *LORA,
                 "--recompute", "none", "--json"])
    assert not out["fits"]
    changes = [s["change"] for s in out["suggestions"]]
    assert changes[:3] == ["fused attention (--attn flash)",
                           "fused linear cross-entropy (--loss fused-linear)",
                           "selective recompute"]
    fused = out["suggestions"][1]
    assert fused["step_time_factor"] == pytest.approx(out["suggestions"][0]["step_time_factor"],
                                                      rel=1e-12)
    mem = _memory("fused-linear", 1, 32768, ("--gpu-gb", "8"))
    assert fused["total_bytes"] == mem["device_bytes"]
    assert fused["total_bytes"] < out["suggestions"][0]["total_bytes"]
    # already fused: not suggested again
    again = _json(["fit", MODEL, "--gpu-gb", "8", "--seq", "32768", "--loss", "fused-linear",
                   *LORA, "--recompute", "none", "--json"])
    assert all("--loss" not in s["change"] for s in again["suggestions"])


@pytest.mark.parametrize("loss", ["chunked:4", "fused-linear"])
def test_report_single_gpu_and_adapters_equal_memory(loss, tmp_path):
    """``report --loss``: the answer's one-GPU total and the adapters section's figures are
    memory --json's; the report's command line carries the loss (its provenance)."""
    mem = _memory(loss)
    out = _json(["report", MODEL, "--batch", "2", "--seq", "1024", "--loss", loss, *LORA,
                 "--recompute", "none", "-o", str(tmp_path), "--json"])
    assert out["answer"]["total_bytes"] == mem["total_bytes"]
    data = json.loads((tmp_path / "report.json").read_text())["data"]
    assert data["request"]["loss"] == loss
    ft = data["finetune"]
    for k in ("trainable_params", "adapter_bytes", "weights_bytes", "gradients_bytes",
              "optimizer_bytes"):
        assert ft[k] == mem[k], k
    assert f"--loss {loss}" in (tmp_path / "report.md").read_text()


BAD = [("chunked:0", "loss ('chunked:0')"), ("chunked:x", "loss ('chunked:x')"),
       ("banana", "loss ('banana')"), ("", "loss ('')")]


def _one_line_exit_2(argv, needle):
    import contextlib
    import io

    from txcalc.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    err = err.getvalue().strip()
    assert rc == 2 and not out.getvalue().strip(), err
    assert "\n" not in err and "Traceback" not in err and needle in err, err


@pytest.mark.parametrize("loss,needle", BAD)
def test_malformed_loss_exits_2_with_one_line(loss, needle, tmp_path):
    _one_line_exit_2(["fit", MODEL, "--gpu-gb", "24", "--loss", loss], needle)
    _one_line_exit_2(["plan", "train", MODEL, "--tokens", "1e9", "--loss", loss], needle)
    _one_line_exit_2(["report", MODEL, "--loss", loss, "-o", str(tmp_path / "r")], needle)
    assert not (tmp_path / "r").exists()  # nothing half-written


@pytest.mark.parametrize("loss", ["chunked", "fused-linear"])
def test_loss_the_head_cannot_run_exits_2(loss, tmp_path):
    """A chunked or fused-linear loss replaces a bias-free causal LM head's matmul: BERT's
    masked-LM head (with a bias) has none, so every command refuses it, naming both."""
    needle = f"loss {loss!r} applies to a causal LM head"
    _one_line_exit_2(["fit", "bert-base-uncased", "--gpu-gb", "24", "--seq", "128", "--loss",
                      loss], needle)
    _one_line_exit_2(["plan", "train", "bert-base-uncased", "--seq", "128", "--tokens", "1e9",
                      "--loss", loss], needle)
    _one_line_exit_2(["report", "bert-base-uncased", "--seq", "128", "--loss", loss, "-o",
                      str(tmp_path / "r")], needle)
    assert not (tmp_path / "r").exists()
    _one_line_exit_2(["report", MODEL, "--inference", "--loss", loss, "-o",
                      str(tmp_path / "r")], "--loss")


def test_planner_logits_are_split_over_tp_and_cp():
    """The loss's transient on the last stage is split like the full loss's (vocab-parallel
    over TP, sequence over CP): the engine's one rule (memory.loss_transient, what its
    MemTracker-checked phases hold), divided, for HF's kernel and Megatron's. The full loss's
    with HF's kernel is two fp32 logits gradients (the nll's and the log-softmax's: 8 T V), not
    one (4 T V, what this test asserted while the planner booked lm_loss.logits_grad_bytes);
    with Megatron's in-place vocab-parallel kernel, the bf16 cast of the gradient written over
    the saved softmax (2 T V)."""
    from txcalc.engine.hardware import get_gpu
    from txcalc.engine.lm_loss import logits_grad_bytes
    from txcalc.engine.memory import TrainingMemory
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    from txcalc.parallel.layout import Layout
    from txcalc.engine.workload import Workload
    cfg = txcalc.load("llama-3-8b")
    V = cfg.vocab_size
    # fp32 gradient rows of one cross-entropy call, micro-batch 2 x 8,192 tokens, over TP 2
    rows = {"full": 2 * 8192, "chunked:4": 2 * 2048, "chunked": 2 * 1024, "fused-linear": 0}
    for loss in LOSSES:
        engine = {}
        for kernel in ("hf", "vocab_parallel"):
            s = TrainSetting(cfg, get_gpu("h100"), 8192, 8, loss=loss, loss_kernel=kernel)
            r = evaluate_layouts(s, [Layout(tp=2, dp=4, micro_batch=2)])
            engine[kernel] = TrainingMemory(cfg, Workload(batch=2, seq=8192, loss=loss,
                                                          loss_kernel=kernel)).logits_transient
            assert int(r["logits_bytes"][0]) == -(-engine[kernel] // 2) > 0
        assert logits_grad_bytes(loss, 2, 8192, V) == 4 * V * rows[loss]
        if loss == "full":
            assert engine == {"hf": 2 * 4 * V * rows[loss], "vocab_parallel": 2 * V * rows[loss]}
        else:  # the chunked and fused-linear losses run their own kernels
            assert engine["hf"] == engine["vocab_parallel"]
