"""Full recompute's rerun block in backward (engine.saved.recompute_transient,
TrainingMemory.recompute_bytes) against MemTracker on the reference model with every block
checkpointed (reference/train.py memory_by_phase, torch.utils.checkpoint): the backward peak
is where a block is rerun, inside its MLP's backward (saved.mlp_backward_transient: the
gradient arriving at the activation and those it makes for its inputs, beside the block's
saved tensors). At 64 tokens the engine's rerun phase comes within 6 % below MemTracker for
a SwiGLU block (2.8-5.7 % here, eager or SDPA) and within 13 % for a GELU one (1.3-12.4 %);
without the MLP transient up to 13.7 % and 15.6 % below, and without the rerun (the loss's
and the end's peaks) 15-22 %. In bf16 under SDPA the loss's peak can be the larger. Not
modelled, in what is left: the attention's smaller backward temporaries and a weight
gradient's. At 512 tokens with eager attention the peak
moves to the softmax's backward (its S x S gradients, saved.attention_backward_transient):
the last test. Longer sequences under SDPA are not compared: the reference keeps its
additive causal mask (an S x S tensor) alive through backward in the checkpoints' context,
which HF's SDPA path does not build."""

import dataclasses

import pytest

from txcalc.engine.finetune import Finetune
from txcalc.engine.memory import TrainingMemory
from txcalc.engine.saved import attention_backward_transient, mlp_backward_transient
from txcalc.engine.workload import Workload
from txcalc.model.config import ModelConfig

torch = pytest.importorskip("torch")
from reference.train import memory_by_phase

CFG = ModelConfig(name="llama-small", n_layers=3, d_model=64, n_heads=4, n_kv_heads=2, d_ff=160,
                  vocab_size=300, activation="swiglu", norm_type="rmsnorm",
                  tie_embeddings=False)
GELU = dataclasses.replace(CFG, name="gelu-small", activation="gelu", norm_type="layernorm")
#: how far below MemTracker the engine's rerun phase may be (the module doc's figures)
BELOW = {"swiglu": 0.94, "gelu": 0.87}


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("cfg", [CFG, GELU], ids=["swiglu", "gelu"])
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("ft", [None, Finetune("lora", 8)], ids=["full", "lora"])
def test_backward_peak_is_a_rerun_block_just_below_memtracker(precision, ft, cfg, attn):
    work = Workload(batch=2, seq=64, recompute="full", attn_impl=attn)
    optimizer = "sgd" if ft is None else "adamw"
    measured = memory_by_phase(cfg, work, precision, optimizer, finetune=ft)["peak_backward"]
    # the reference's SDPA on the CPU runs its flash kernel (no S x S kept): txcalc's "flash"
    work = dataclasses.replace(work, attn_impl="flash" if attn == "sdpa" else attn)
    m = TrainingMemory(cfg, work, precision, optimizer, ft)
    ph = m.phases()
    # the rerun holds the backward peak (its temporaries are the rerun's), or the loss does
    # (in bf16 under SDPA a block's rerun is the smaller)
    rerun_peak = ph["peak_backward"]["temp"] == m.recompute_bytes
    assert m.recompute_bytes > 0 and (rerun_peak or attn == "sdpa")
    # nothing recomputed: no rerun
    assert TrainingMemory(cfg, Workload(batch=2, seq=64), precision, optimizer,
                          ft).recompute_bytes == 0
    got, want = ph["peak_backward"]["total"], measured["total"]
    assert BELOW[cfg.activation] * want <= got <= want, (got / want - 1, got, want)
    # the MLP was found in every block: its transient is part of the rerun
    mlp = mlp_backward_transient(m.ops, dataclasses.replace(work, recompute="none"),
                                 m._bytes.act)
    assert len(mlp) == cfg.n_layers and min(mlp.values()) > 0
    # without the rerun the engine's backward peak was the loss's or the end's: further off
    without = max(ph["after_forward"]["total"] + m._loss_temp("backward"),
                  ph["after_backward"]["total"])
    assert want - without > want - got or not rerun_peak, (without, got, want)


@pytest.mark.parametrize("cfg", [CFG, GELU], ids=["swiglu", "gelu"])
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("ft", [None, Finetune("lora", 8)], ids=["full", "lora"])
def test_eager_attention_rerun_peaks_in_the_softmax_backward(precision, ft, cfg):
    """512 tokens, eager attention: the rerun block's backward peaks at its softmax's
    backward, where the S x S gradients (saved.attention_backward_transient) outweigh the
    MLP's; the engine's rerun phase comes within 13 % below MemTracker (4.8-10.3 % here, the
    reference's causal mask, 2 % of it at this length, included), where without them it was
    39-55 % below."""
    work = Workload(batch=2, seq=512, recompute="full", attn_impl="eager")
    optimizer = "sgd" if ft is None else "adamw"
    want = memory_by_phase(cfg, work, precision, optimizer, finetune=ft)["peak_backward"]
    m = TrainingMemory(cfg, work, precision, optimizer, ft)
    ph = m.phases()
    none = dataclasses.replace(work, recompute="none")
    attn = attention_backward_transient(m.ops, none, m._bytes.act)
    mlp = mlp_backward_transient(m.ops, none, m._bytes.act)
    assert min(attn.values()) > max(mlp.values()) > 0
    assert ph["peak_backward"]["temp"] == m.recompute_bytes
    got = ph["peak_backward"]["total"]
    assert 0.87 * want["total"] <= got <= want["total"], (got / want["total"] - 1)
