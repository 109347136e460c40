"""Fine-tuning (txcalc/finetune.py) against independent references:

- the reference model with LoRA / DoRA adapters and frozen parameters (reference/lora.py):
  trainable parameters, gradient bytes, FLOPs of a step (FlopCounterMode) and bytes saved for
  backward per layer (saved_tensors_hooks) over hypothesis-drawn configs x methods x targets x
  ranks x recompute modes; MemTracker by category on the CPU;
- PEFT's LoRA on the HF model (meta device): trainable count and FLOPs;
- bitsandbytes' Params4bit / Int8Params storage;
- published figures (QLoRA, LoRA and PEFT's README), each with its setup stated;
- bad combinations: one line, exit 2.
"""

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from txcalc.accounting import count_flops
from txcalc.components import model_ops
from txcalc.errors import TxcalcError
from txcalc.finetune import (ADAPTABLE, Finetune, _adaptable, _name, apply_finetune,
                             quantized_weight_bytes)
from txcalc.memory import TrainingMemory
from txcalc.workload import Workload

from .ref_configs import configs

torch = pytest.importorskip("torch")
from reference.lora import finetune  # noqa: E402
from reference.measure import by_layer, flops_by_module, make_inputs, saved_by_module  # noqa: E402
from reference.model import build  # noqa: E402

SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def methods(draw, cfg):
    """A fine-tuning method valid for ``cfg``: mode, targets (a group or module names present),
    a rank up to the narrowest target, LoRA dropout; freeze: a trainable set."""
    mode = draw(st.sampled_from(["lora", "lora", "qlora", "dora", "freeze"]))
    if mode == "freeze":
        depth = cfg.stacks[-1][1]
        parts = draw(st.sets(st.sampled_from([f"last:{n}" for n in range(1, depth + 1)]
                                             + ["head", "norms", "embeddings"]), min_size=1))
        return Finetune("freeze", trainable=",".join(sorted(parts)))
    ops = [op for op in model_ops(cfg) if _adaptable(op)]
    names = sorted({_name(op) for op in ops}, key=ADAPTABLE.index)
    groups = [g for g in ("all-linear", "attn", "mlp")
              if any((g == "all-linear" and _name(op) != "lm_head") or
                     (g == "attn" and op.component.partition(".")[0] in ("attn", "cross_attn"))
                     or (g == "mlp" and (op.component.startswith("mlp.") or
                                         op.component.startswith("moe.shared.")))
                     for op in ops)]
    if draw(st.booleans()) and groups:
        targets = draw(st.sampled_from(groups))
    else:
        targets = ",".join(draw(st.sets(st.sampled_from(names), min_size=1, max_size=3)))
    chosen = [op for op in apply_finetune(cfg, model_ops(cfg), Finetune("lora", 1,
                                                                         targets=targets))
              if op.path.endswith(".lora_A")]
    width = min(min(op.d_in, op.d_out) for op in model_ops(cfg)
                if any(c.path == op.path + ".lora_A" for c in chosen))
    rank = draw(st.integers(1, min(width, 6)))
    return Finetune(mode, rank=rank, alpha=2.0 * rank, targets=targets,
                    lora_dropout=draw(st.sampled_from([0.0, 0.0, 0.1])))


def lengths(data, cfg):
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(2, 10), label="seq")
    src = data.draw(st.integers(2, 10), label="src_seq") if cfg.family == "encoder-decoder" else 0
    return batch, seq, src


def nonzero(per_layer: dict) -> dict:
    """Layers that save something (a frozen embedding stage saves nothing: no measured row)."""
    return {k: v for k, v in per_layer.items() if v}


def reference(cfg, ft, recompute="none", dtype=None):
    model = build(cfg, dtype or torch.bfloat16, "meta", recompute=recompute)
    return finetune(model, ft)


@settings(max_examples=120, **SETTINGS)
@given(cfg=configs(), data=st.data())
def test_trainable_flops_and_saved_bytes_exact_against_the_reference(cfg, data):
    ft = data.draw(methods(cfg), label="method")
    batch, seq, src = lengths(data, cfg)
    work = Workload(batch=batch, seq=seq, src_seq=src, dropout_mask="act")
    model = reference(cfg, ft)
    mem = TrainingMemory(cfg, work, "bf16-mixed", "adamw", ft)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) == mem.trainable_params
    assert sum(p.numel() for p in model.parameters()) == mem.n_params
    # gradients: one bf16 gradient per trainable parameter, none for frozen ones
    inputs = make_inputs(model, batch, seq, src)
    _, fwd, bwd = flops_by_module(model, inputs)
    assert all((p.grad is not None) == p.requires_grad for p in model.parameters())
    assert sum(p.grad.untyped_storage().nbytes() for p in trainable) == mem.gradients
    f = count_flops(cfg, work, ft)
    assert (fwd, bwd) == (f.forward, f.backward)
    for recompute in ("none", "selective", "full"):
        w = dataclasses.replace(work, recompute=recompute)
        model = reference(cfg, ft, recompute)
        measured, _ = saved_by_module(model, make_inputs(model, batch, seq, src))
        predicted = TrainingMemory(cfg, w, "bf16-mixed", "adamw", ft).activations_by_layer()
        assert nonzero(predicted) == by_layer(measured), recompute
