"""The optimizer step's transients, one rule (memory.optimizer_step_extra, OPTIMIZER_STEPS) read by
the engine (TrainingMemory.phases' peak_step) and the planner (train.evaluate's "step"
category), and each stack's kernel (Stack.optimizer_kernel).

    kernel    | temporaries                | fp32 gradient copy (mixed precision)
    ----------|----------------------------|-------------------------------------
    foreach   | Adam/AdamW: one state      | 4 B per trainable parameter
    fused     | none                       | 4 B per trainable parameter
    main_grad | none                       | none (fp32 gradient buffers)

The temporaries are measured here with MemTracker on the CPU, torch's foreach and fused
kernels both (torch.optim's fused AdamW, Adam and SGD run on CPU in torch 2.13); the mixed
precision step's fp32 copy (reference/train.py) is measured by tests/conformance/test_memory_phases.py.

On one GPU (tp = pp = dp = 1, one micro-batch) the planner's total is the larger of its
forward/backward sum and the step: where the engine's peak is the step (full fine-tuning with
Adam), the two totals are the same bytes; where the engine's peak is in backward the planner
books the gradients beside every activation (its forward/backward sum is conservative: with
more than one micro-batch they are), so it is above by at most the gradients (exactly them
where the engine's peak is the start of backward, LoRA's).
"""

from __future__ import annotations

import pytest
import torch

import txcalc
from txcalc.engine.finetune import Finetune
from txcalc.train.fit import Setup, fit
from txcalc.engine.hardware import get_gpu
from txcalc.engine.memory import OPTIMIZER_STEPS, TrainingMemory, optimizer_step_extra
from txcalc.parallel.overheads import Overheads
from txcalc.train.setting import TrainSetting
from txcalc.train.evaluate import evaluate_layouts
from txcalc.parallel.layout import Layout
from txcalc.engine.stacks import STACKS
from txcalc.engine.workload import Workload

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _measured_step_temporaries(kernel: str, optimizer: str, dtype) -> tuple[int, int]:
    """(trained parameters, MemTracker's peak during a steady optimizer step less the bytes
    alive after it) for a two-Linear model, the step's states already made by a first step."""
    from torch.distributed._tools.mem_tracker import MemTracker
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512),
                                torch.nn.Linear(512, 256, bias=False)).to(dtype)
    params = list(model.parameters())
    flag = {"foreach": True} if kernel == "foreach" else {"fused": True}
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9, **flag)
    else:
        opt = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[optimizer](
            params, lr=1e-3, **flag)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn_like(p)
        if opt.state:
            break
        opt.step()
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        opt.step()
        after = next(iter(tracker.get_tracker_snapshot().values()))["Total"]
    peak = next(iter(tracker.get_tracker_snapshot("peak").values()))["Total"]
    return sum(p.numel() for p in params), peak - after


@pytest.mark.parametrize("precision", sorted(DTYPES))
@pytest.mark.parametrize("optimizer", ["adamw", "adam", "sgd"])
@pytest.mark.parametrize("kernel", ["foreach", "fused"])
def test_step_temporaries_measured_on_cpu(kernel, optimizer, precision):
    """torch's foreach Adam/AdamW allocate the second moment's sqrt for every parameter at
    once (one state: 4 B a parameter in fp32, 2 in bf16); their fused kernels and SGD
    allocate nothing beyond their states: the measured bytes are the rule's."""
    n, measured = _measured_step_temporaries(kernel, optimizer, DTYPES[precision])
    copy, temps = optimizer_step_extra(kernel, optimizer, precision, n)
    assert copy == 0  # no fp32 master in either policy
    assert measured == temps
    if kernel == "foreach" and optimizer != "sgd":
        assert measured == n * DTYPES[precision].itemsize > 0


def test_the_rule_per_kernel():
    """The fp32 gradient copy exists under mixed precision unless the kernel steps on fp32
    gradient buffers; the temporaries only under foreach Adam/AdamW."""
    n = 1000
    assert optimizer_step_extra("foreach", "adamw", "bf16-mixed", n) == (4 * n, 4 * n)
    assert optimizer_step_extra("fused", "adamw", "bf16-mixed", n) == (4 * n, 0)
    assert optimizer_step_extra("main_grad", "adamw", "bf16-mixed", n) == (0, 0)
    assert optimizer_step_extra("foreach", "adamw", "bf16", n) == (0, 2 * n)
    assert optimizer_step_extra("foreach", "none", "bf16-mixed", n) == (0, 0)
    assert optimizer_step_extra("foreach", "adam8bit", "bf16-mixed", n) == (4 * n, 0)
    assert {s.optimizer_kernel for s in STACKS.values()} <= set(OPTIMIZER_STEPS)
    assert STACKS["hf-eager"].optimizer_kernel == "foreach"
    assert STACKS["megatron"].optimizer_kernel == "main_grad"
    assert STACKS["deepspeed"].optimizer_kernel == "fused"
    from txcalc.errors import WorkloadError
    with pytest.raises(WorkloadError, match="optimizer kernel"):
        optimizer_step_extra("apex", "adamw", "bf16-mixed", n)


SEQ = 1433


def _one_gpu(cfg, ft, optimizer, precision, kernel):
    s = TrainSetting(cfg, get_gpu("h200"), SEQ, 1, precision, optimizer, finetune=ft,
                     optimizer_kernel=kernel)
    r = evaluate_layouts(s, [Layout(micro_batch=1, recompute="none")])
    m = TrainingMemory(cfg, Workload(batch=1, seq=SEQ, attn_impl="flash", recompute="none"),
                       precision, optimizer, ft, optimizer_kernel=kernel)
    return {k: int(v[0]) for k, v in r.items() if k.endswith("bytes")}, m


@pytest.mark.parametrize("ft", [None, Finetune("lora", 16)], ids=["full", "lora"])
def test_one_gpu_plan_total_is_memory_total(ft):
    """llama-3.1-8b, batch 1, 1,433 tokens: the planner's per-GPU tensors (its total less the
    framework's bytes) against ``memory``'s peak over every optimizer kernel, optimizer and
    precision: equal where the step holds the engine's peak, else above by at most the
    gradients; the sum of the categories is the total."""
    cfg = txcalc.load("llama-3.1-8b")
    wrong = {}
    for kernel in OPTIMIZER_STEPS:
        for optimizer in ("adamw", "sgd", "adam8bit"):
            for precision in ("bf16-mixed", "fp32", "bf16"):
                r, m = _one_gpu(cfg, ft, optimizer, precision, kernel)
                assert r["total_bytes"] == sum(v for k, v in r.items()
                                               if k not in ("total_bytes", "host_bytes"))
                tensors = r["total_bytes"] - r["framework_bytes"]
                over = tensors - m.total
                ok = over == 0 if m.peak_phase == "peak_step" else 0 < over <= m.gradients
                if ft is not None:  # LoRA: the start of backward, gradients not yet made
                    ok = ok and m.peak_phase == "peak_backward" and over == m.gradients
                if not ok:
                    wrong[(kernel, optimizer, precision)] = (over, m.peak_phase)
    assert not wrong


def test_full_finetune_llama_8b_figures():
    """The issue's setup (full fine-tuning, bf16-mixed, AdamW, batch 1, 1,433 tokens): the
    engine's 192.7 GB peak at the step is what the planner and fit (one GPU and its planner
    path) book; the planner's forward/backward sum alone was 139 GB of tensors. A fused step
    frees foreach's 32 GB temporary, Megatron's fp32 buffers the 32 GB copy too."""
    cfg = txcalc.load("llama-3.1-8b")
    r, m = _one_gpu(cfg, None, "adamw", "bf16-mixed", "foreach")
    n = m.trainable_params
    assert m.peak_phase == "peak_step" and round(m.total / 1e9, 1) == 192.7
    assert r["total_bytes"] - r["framework_bytes"] == m.total
    assert 139e9 < m.total - r["step_bytes"] < 140e9  # the planner's sum before
    assert m.master_grad_copies == m.optimizer_temporaries == 4 * n
    assert r["total_bytes"] == Overheads().device_bytes(m.total)
    setup = Setup(cfg)
    # fit on one GPU: the same tensors with what nvidia-smi shows on top (issue 28:
    # engine.device.device_memory, reserved + CUDA context; the planner keeps Overheads)
    from txcalc.engine.device import device_memory
    assert setup.need(1, SEQ) == device_memory(m.total).device_bytes
    # its planner path (ZeRO-3 over one GPU: ZeRO-0, nothing to shard) books the same
    assert int(setup.planner_bytes(1, SEQ)["total_bytes"][0]) == r["total_bytes"]
    fused, main = (_one_gpu(cfg, None, "adamw", "bf16-mixed", k)[1] for k in ("fused",
                                                                           "main_grad"))
    assert m.total - fused.total == 4 * n
    assert fused.peak_phase == "peak_step"
    assert main.peak_phase == "peak_backward"


def test_fit_one_gpu_and_planner_path_agree():
    """fit at N = 1 (the engine) and its planner path (``Setup.planner_bytes``) give the same
    bytes for full fine-tuning at the step-bound answer, each kernel."""
    cfg = txcalc.load("llama-3.2-1b")
    for kernel in OPTIMIZER_STEPS:
        setup = Setup(cfg, optimizer_kernel=kernel)
        res = fit(setup, 40 * 10**9)
        assert res.fits
        m = setup.memory(1, res.max_seq)
        planned = setup.planner_bytes(1, res.max_seq)
        tensors = int(planned["total_bytes"][0] - planned["framework_bytes"][0])
        over = tensors - m.total
        assert over == 0 if m.peak_phase == "peak_step" else 0 < over <= m.gradients


def test_zero_shards_the_step_transient():
    """ZeRO-1/2/3 over 2 ranks, full fine-tuning at 256 tokens (foreach's step holds the
    peak): the step is the rank's model states, the batch (the engine's step_held) and the
    foreach temporary of the rank's local shard (4 B a local parameter: the parameters whose
    fp32 master and two fp32 states the optimizer category holds, beside one 4-byte step
    counter per tensor), with no fp32 gradient copy (sharded optimizers hold fp32 gradient
    shards, memory.ZeroBytes); a fused step adds nothing and is not the peak."""
    from txcalc.engine.memory import param_count, param_tensor_count
    cfg = txcalc.load("llama-3.2-1b")
    held = TrainingMemory(cfg, Workload(batch=1, seq=256)).step_held
    for zero in (1, 2, 3):
        for kernel in ("foreach", "fused"):
            s = TrainSetting(cfg, get_gpu("h200"), 256, 2, optimizer_kernel=kernel)
            r = evaluate_layouts(s, [Layout(dp=2, zero=zero, micro_batch=1)])
            r = {k: int(v[0]) for k, v in r.items() if k.endswith("bytes")}
            local = (r["optimizer_bytes"] - 4 * param_tensor_count(s.ops)) // (4 + 2 * 4)
            assert 2 * local >= param_count(s.ops) > local
            states = r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"]
            if kernel == "fused":
                assert r["step_bytes"] == 0, zero
                continue
            assert r["step_bytes"] > 0, zero
            assert r["total_bytes"] - r["framework_bytes"] == \
                states + held.first + held.last + 4 * local, zero


@pytest.mark.parametrize("stack", [None, "deepspeed", "megatron"])
def test_plan_train_cli_one_gpu_total_equals_memory_json(stack, big_gpu):
    """The CLI paths, full fine-tuning of llama-3.2-1b at 2 x 1,024 tokens with AdamW:
    ``plan train --gpus 1 --zero 0``'s per-GPU tensors (total less the framework's bytes)
    are ``memory --json``'s total where the planner's step is its peak (the default stack's
    foreach step), else above by at most the gradients (the planner's forward/backward sum
    books them beside every activation): DeepSpeed's fused step and Megatron's, on fp32
    gradient buffers, allocate less at the step, each the stack's kernel in both commands."""
    import json

    from typer.testing import CliRunner

    from txcalc.cli import app

    def run(args):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)
    extra = ["--stack", stack] if stack else []
    mem = run(["memory", "llama-3.2-1b", "--batch", "2", "--seq", "1024", "--recompute",
               "none", "--loss", "full", *extra, "--json"])
    plan = run(["plan", "train", "llama-3.2-1b", "--gpu", "big", "--gpu-file", big_gpu,
                "--gpus", "1", "--zero", "0", "--micro-batch", "2", "--seq", "1024",
                "--tokens", "2048", "--recompute", "none", "--loss", "full", *extra, "--json"])
    best = plan["best"]
    kernel = STACKS[stack].optimizer_kernel if stack else "foreach"
    assert mem["optimizer_kernel"] == kernel
    tensors = best["total_bytes"] - best["memory_bytes"]["framework"]
    if best["memory_bytes"]["step"] > 0:
        assert tensors == mem["total_bytes"] and mem["peak_phase"] == "peak_step"
    else:
        assert 0 < tensors - mem["total_bytes"] <= mem["gradients_bytes"]
    assert (best["memory_bytes"]["step"] > 0) == (kernel == "foreach")
    assert (mem["peak_phase"] == "peak_step") == (kernel != "main_grad")
