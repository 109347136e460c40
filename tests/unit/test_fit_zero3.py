"""``txcalc fit --gpus N`` (N > 1: ZeRO-3 over N data-parallel GPUs) answers with the planner's
own per-rank bytes for the same layout, so that fit and ``plan train`` cannot disagree.

The planner's per-rank ZeRO-3 bytes are themselves checked against torch.distributed in
tests/conformance/test_distributed.py (FSDP2 on two gloo ranks: the model states byte for byte,
test_rank_bytes_equal_prediction[fsdp]; llama-3-8b over a fake process group of 8:
test_fsdp_fake_pg_llama3_8b_peak_within_3_percent). Here the planner is called as its own
callers call it (``evaluate_layouts`` on a TrainSetting and a Layout stated in the test, and
the ``plan train`` command with every layout knob pinned), never through fit's code:

    fit's setup                    | planner's layout
    -------------------------------|-------------------------------------------------------
    --gpus N, --batch B            | dp N, zero 3, tp = pp = 1, micro-batch B, global batch N B
    --recompute R                  | recompute R
    --offload optimizer (all)      | TrainSetting.offload_optimizer
    --offload activations (all)    | Layout.offload_checkpoints (full recompute)

Each fit answer is the longest sequence whose planner total fits the GPU, and one token more
does not. One GPU keeps the engine's peak (TrainingMemory's phases): those answers are
tests/conformance/test_finetune.py's, test_loss_flags.py's and test_one_gpu_plan_finetune.py's, and the
planner is not built for them.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import txcalc
from txcalc.engine.finetune import Finetune
from txcalc.train.fit import Setup, fit
from txcalc.engine.hardware import get_gpu
from txcalc.engine.memory import TrainingMemory
from txcalc.engine.device import device_memory
from txcalc.parallel.overheads import Overheads
from txcalc.train.setting import TrainSetting
from txcalc.train.evaluate import evaluate_layouts
from txcalc.parallel.layout import Layout
from txcalc.engine.workload import Workload

GB = 10**9
#: model: the GPU's bytes (full fine-tuning fits from two GPUs on); a dense GQA llama with
#: tied embeddings, an MHA one, a qwen2 (q/k/v biases)
MODELS = {"llama-3.2-1b": 24 * GB, "llama-2-7b": 80 * GB, "qwen2-7b": 80 * GB}
FINETUNES = {"full": None, "lora": Finetune("lora", 16), "qlora": Finetune("qlora", 64),
             "freeze-last2-head": Finetune("freeze", trainable="last:2,head")}
GPUS = (2, 4, 8)


def _planner(cfg, n, batch, seq, ft=None, recompute="none", offload="none", loss="full",
             optimizer="adamw", optimizer_kernel="foreach"):
    """The planner's rank-0 categories for ZeRO-3 over n GPUs, one micro-batch each."""
    s = TrainSetting(cfg, get_gpu("h200"), seq, n * batch, optimizer=optimizer,
                     finetune=ft, loss=loss,
                     offload_optimizer=offload in ("optimizer", "all"),
                     optimizer_kernel=optimizer_kernel)
    lay = Layout(dp=n, zero=3, micro_batch=batch, recompute=recompute,
                 offload_checkpoints=offload in ("activations", "all"))
    return {k: int(v[0]) for k, v in evaluate_layouts(s, [lay]).items() if k.endswith("bytes")}


@pytest.mark.parametrize("ft", sorted(FINETUNES))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_fit_over_n_gpus_is_the_planners_per_rank_total(model, ft):
    """3 models x 4 fine-tuning modes x N in {2, 4, 8}: fit's total at its answer is the
    planner's per-GPU total of that layout, and one token more overflows the GPU under the
    planner. The planner's ZeRO-3 terms are in it (the gathered root unit and prefetched
    blocks: zero3_buffers; the communication buffers in the framework's bytes)."""
    cfg, gpu_bytes = txcalc.load(model), MODELS[model]
    for n in GPUS:
        kernel = "foreach"
        if (model, ft, n) == ("qwen2-7b", "full", 2):
            # torch's default foreach AdamW allocates the second moment's sqrt for the rank's
            # whole shard inside its step (3.8 B parameters x 4 B): the step then needs more
            # than 80 GB even at one token, the planner's total at fit's smallest try; with a
            # fused step (no temporaries, memory.OPTIMIZER_STEPS) it fits, checked below
            res = fit(Setup(cfg, finetune=FINETUNES[ft], gpus=n), gpu_bytes)
            at = _planner(cfg, n, 1, 1, FINETUNES[ft])
            assert not res.fits and res.total_bytes == at["total_bytes"] > gpu_bytes
            assert at["step_bytes"] > at["total_bytes"] - gpu_bytes
            kernel = "fused"
        res = fit(Setup(cfg, finetune=FINETUNES[ft], gpus=n, optimizer_kernel=kernel),
                  gpu_bytes)
        assert res.fits and res.max_batch == 1, (n, res.total_bytes)
        at = _planner(cfg, n, 1, res.max_seq, FINETUNES[ft], optimizer_kernel=kernel)
        assert res.total_bytes == at["total_bytes"] <= gpu_bytes, n
        assert at["zero3_buffers_bytes"] > 0
        assert _planner(cfg, n, 1, res.max_seq + 1, FINETUNES[ft],
                        optimizer_kernel=kernel)["total_bytes"] > gpu_bytes


def test_fit_largest_batch_over_n_gpus_is_the_planners():
    """``--seq S``: the largest micro-batch per GPU, the planner's total at it and over it."""
    cfg = txcalc.load("llama-3.2-1b")
    ft = FINETUNES["lora"]
    res = fit(Setup(cfg, finetune=ft, gpus=4, recompute="selective"), 24 * GB, seq=2048)
    assert res.fits and res.max_batch > 1
    at = _planner(cfg, 4, res.max_batch, 2048, ft, "selective")
    assert res.total_bytes == at["total_bytes"] <= 24 * GB
    over = _planner(cfg, 4, res.max_batch + 1, 2048, ft, "selective")
    assert over["total_bytes"] > 24 * GB


@pytest.mark.parametrize("argv", [
    ["--finetune", "qlora", "--gpus", "2"],
    ["--gpus", "8", "--recompute", "full", "--loss", "fused-linear"],
], ids=["qlora-2", "full-8-recompute-fused"])
def test_fit_cli_equals_plan_train_pinned(argv):
    """The two commands, each as a user types it: ``fit --gpus N --json``'s total_bytes at its
    max_seq is ``plan train --gpus N --zero 3 --tp 1 --pp 1 --micro-batch 1 --seq max_seq
    --json``'s best total, category by category summed."""
    from typer.testing import CliRunner

    from txcalc.cli import app

    def run(args):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)
    out = run(["fit", "llama-3.2-1b", "--gpu-gb", "24", *argv, "--json"])
    n = int(argv[argv.index("--gpus") + 1])
    rest = [a for a in argv if a not in ("--gpus", str(n))]
    if "--recompute" not in rest:  # fit's default: gradient checkpointing (issue 28)
        rest += ["--recompute", "full"]
    if "--finetune" in rest:  # fit's default recipe when fine-tuning (issue 28)
        rest += ["--recipe", "hf-peft"]
    assert out["fits"] and out["gpus"] == n
    plan = run(["plan", "train", "llama-3.2-1b", "--gpus", str(n), "--zero", "3", "--tp", "1",
                "--pp", "1", "--micro-batch", "1", "--seq", str(out["max_seq"]),
                "--global-batch", str(n), "--tokens", "1M", *rest, "--json"])
    best = plan["best"]
    assert best["layout"]["dp"] == n and best["layout"]["zero"] == 3
    assert out["total_bytes"] == best["total_bytes"] == sum(best["memory_bytes"].values())


@pytest.mark.parametrize("offload,recompute", [("optimizer", "none"), ("all", "full")])
def test_offload_over_n_gpus_is_the_planners(offload, recompute):
    """Offload over N GPUs: the optimizer category leaves the GPU (the planner's
    offload_optimizer), the checkpoints too under full recompute (offload_checkpoints)."""
    cfg = txcalc.load("llama-3.2-1b")
    res = fit(Setup(cfg, recompute=recompute, offload=offload, gpus=4), 24 * GB)
    at = _planner(cfg, 4, 1, res.max_seq, None, recompute, offload)
    assert res.total_bytes == at["total_bytes"] and at["optimizer_bytes"] == 0
    assert at["host_bytes"] > 0
    assert _planner(cfg, 4, 1, res.max_seq + 1, None, recompute, offload)["total_bytes"] \
        > 24 * GB


@pytest.mark.parametrize("ft", ["full", "lora", "freeze-last2-head"])
@pytest.mark.parametrize("offload,recompute", [("optimizer", "none"), ("all", "full")])
def test_planner_offload_on_one_gpu_equals_the_engine(offload, recompute, ft):
    """The planner's optimizer offload is the engine's rule (TrainingMemory.host_bytes: states,
    step counters, fp32 master and the fp32 gradients the CPU step reads; the offloaded
    checkpoints), checked where both hold the whole model: one GPU, ZeRO-0."""
    cfg = txcalc.load("llama-3.2-1b")
    s = TrainSetting(cfg, get_gpu("h100"), 1024, 1, finetune=FINETUNES[ft],
                     offload_optimizer=True)
    r = evaluate_layouts(s, [Layout(recompute=recompute,
                                    offload_checkpoints=offload == "all")])
    m = TrainingMemory(cfg, Workload(batch=1, seq=1024, attn_impl="flash", recompute=recompute),
                       finetune=FINETUNES[ft], offload=offload)
    assert int(r["optimizer_bytes"][0]) == 0
    assert int(r["host_bytes"][0]) == m.host_bytes > m.optimizer_total
    kept = evaluate_layouts(dataclasses.replace(s, offload_optimizer=False),
                            [Layout(recompute=recompute, offload_checkpoints=offload == "all")])
    assert int(kept["optimizer_bytes"][0]) == m.optimizer_total


def test_the_suggested_gpu_count_is_the_planners(capsys):
    """When only more GPUs make it fit, the suggestion's bytes are the planner's for the
    setup reached (every change above it applied: offload all, full recompute, ...)."""
    from txcalc.cli import main
    # 20k tokens (was 64k, then 48k, then 28k: with the default recipe's fp32 upcast, QLoRA's
    # gathered fp32 embedding and head and fp32 checkpoints left 64k above 24 GB even on 1,024
    # GPUs; with the block rerun in backward booked (full recompute: one block's saved
    # tensors, not split by ZeRO), 48k needs 28.7 GiB there; with the rerun's MLP gradients
    # (2 x 28,672 x 2 bytes a token) 28k and 24k no longer fit on 1,024)
    rc = main(["fit", "llama-3.1-70b", "--gpu-gb", "24", "--seq", "20480", "--json"])
    out = json.loads(capsys.readouterr().out)
    last = out["suggestions"][-1]
    assert rc == 0 and last["fits"] and last["change"].endswith("GPUs (ZeRO-3)")
    n = int(last["change"].split()[0])
    cfg = txcalc.load("llama-3.1-70b")
    ft = Finetune("qlora", upcast=True)  # the suggested QLoRA, as the default recipe runs it
    at = _planner(cfg, n, 1, 20480, ft, "full", "all", "fused-linear", "adam8bit")
    assert last["total_bytes"] == at["total_bytes"] <= 24 * GB
    assert _planner(cfg, n // 2, 1, 20480, ft, "full", "all", "fused-linear",
                    "adam8bit")["total_bytes"] > 24 * GB


def test_one_gpu_does_not_build_the_planner(monkeypatch):
    """N = 1 answers stay the engine's (TrainingMemory.total with device_memory's share), and
    fit there never evaluates a layout (the fast path of ``fit llama-3.1-8b --gpu rtx-4090
    --finetune qlora``, benchmarks/cli_speed.py)."""
    import txcalc.train.evaluate as ev

    def refuse(*a, **k):
        raise AssertionError("the planner was built for one GPU")
    monkeypatch.setattr(ev, "evaluate_layouts", refuse)
    cfg = txcalc.load("llama-3.2-1b")
    setup = Setup(cfg, finetune=FINETUNES["qlora"])
    res = fit(setup, 24 * GB)
    m = TrainingMemory(cfg, Workload(batch=1, seq=res.max_seq, attn_impl="flash"),
                       finetune=FINETUNES["qlora"])
    # one GPU: what nvidia-smi shows, reserved + CUDA context (issue 28; was Overheads')
    assert res.total_bytes == device_memory(m.total).device_bytes


def test_eager_attention_over_n_gpus_stays_exact():
    """Eager attention's S x S scores: the answer is still the planner's, and the bisection's
    first probes (tens of millions of tokens, where the planner's int64 tables would overflow
    and wrap) are refused on the engine's exact activations instead (fit.PLANNER_MAX_BYTES):
    before that guard the answer was 109,587,847 tokens on 80 GB."""
    from txcalc.train.fit import PLANNER_MAX_BYTES
    from txcalc.inputs import MAX_SEQ
    cfg = txcalc.load("llama-3.2-1b")
    setup = Setup(cfg, precision="bf16", attn="eager", gpus=4)
    res = fit(setup, 80 * GB)

    def planner(seq):
        s = TrainSetting(cfg, get_gpu("h200"), seq, 4, precision="bf16", attn_impl="eager")
        return int(evaluate_layouts(s, [Layout(dp=4, zero=3)])["total_bytes"][0])
    assert res.total_bytes == planner(res.max_seq) <= 80 * GB < planner(res.max_seq + 1)
    assert res.max_seq < 8192
    top = TrainingMemory(cfg, Workload(batch=2, seq=MAX_SEQ, attn_impl="eager"), "bf16")
    assert top.activations > PLANNER_MAX_BYTES and setup.need(1, MAX_SEQ) == top.activations
