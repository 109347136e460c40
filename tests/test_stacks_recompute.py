"""Framework profiles (fused kernels), recompute granularity and communication overlap.

Saved bytes are measured on the reference model (reference/model.py), a small Llama in bf16 on
CPU with SDPA (its fused CPU flash kernel): with saved_tensors_hooks (reference/saved.py) where
autograd saves the tensors; where a selective-checkpoint cache holds them (op-level), with
``live_bytes_after``, which watches every storage the forward creates and counts those still
alive. The fused kernels are the ones torch.compile (inductor, CPU) builds from the same code.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from reference.model import apply_recompute, build, use_kernels  # noqa: E402
from reference.saved import live_bytes_after, saved_bytes_by_module  # noqa: E402
from txcalc.hf import from_hf_dict  # noqa: E402
from txcalc.memory import TrainingMemory  # noqa: E402
from txcalc.workload import FUSED_KERNELS, Workload, WorkloadError  # noqa: E402

B, S = 2, 64
TINY = dict(model_type="llama", hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=256, vocab_size=512,
            max_position_embeddings=4096)


@pytest.fixture(scope="module")
def cfg():
    return from_hf_dict(TINY, "tiny-llama")


def _model(cfg, work: Workload):
    torch.manual_seed(0)
    m = build(cfg, torch.bfloat16, "cpu", attn_impl="flash")
    return use_kernels(apply_recompute(m, work), work.fused)


def _ids(cfg):
    return torch.randint(0, cfg.vocab_size, (B, S), generator=torch.Generator().manual_seed(0))


def hooked(cfg, work: Workload) -> int:
    m, ids = _model(cfg, work), _ids(cfg)
    return sum(saved_bytes_by_module(m, lambda: m(ids))[0].values())


def live(cfg, work: Workload) -> int:
    m, ids = _model(cfg, work), _ids(cfg)
    return live_bytes_after(m, lambda: m(ids))[0]


def engine(cfg, work: Workload) -> int:
    return TrainingMemory(cfg, work, "bf16-mixed").activations


def W(**kw) -> Workload:
    return Workload(batch=B, seq=S, attn_impl="flash", **kw)


# --- 1. fused kernels: each profile's saved bytes -------------------------------------------
@pytest.mark.parametrize("fused", [("norm",), ("act",), ("loss",), FUSED_KERNELS])
def test_fused_kernels_saved_bytes_exact(cfg, fused):
    """torch.compile'd RMSNorm keeps its bf16 input and the fp32 1/rms (2 B per unit, not HF
    eager's fp32 copy + normalised input, 6 B); the compiled SwiGLU keeps gate and up (not
    silu(gate) too); the compiled cross-entropy keeps the bf16 logits and two fp32 row
    statistics (not the fp32 log-probabilities). Exact, byte for byte."""
    work = W(fused=fused)
    assert engine(cfg, work) == hooked(cfg, work)
    assert engine(cfg, work) < engine(cfg, W())


def test_fused_norm_saves_two_bytes_a_unit_instead_of_six(cfg):
    """The issue's rule of thumb, on the engine: per norm and token, 4 x D bytes fewer (an
    fp32 RMSNorm saves ~6 B per unit, a fused one ~2); 2 L + 1 norms."""
    D, L = TINY["hidden_size"], TINY["num_hidden_layers"]
    assert engine(cfg, W()) - engine(cfg, W(fused=("norm",))) == (2 * L + 1) * B * S * D * 4


def test_fused_kernels_with_partial_recompute(cfg):
    work = W(fused=FUSED_KERNELS, recompute="full", recompute_layers=2)
    assert engine(cfg, work) == hooked(cfg, work)


# --- 2. recompute granularity ---------------------------------------------------------------
@pytest.mark.parametrize("mode,method,n", [
    ("full", "block", 1), ("full", "block", 2), ("full", "block", 3), ("full", "every", 2),
    ("full", "uniform", 2), ("full", "uniform", 4), ("selective", "block", 2),
    ("selective", "every", 3)])
def test_recompute_methods_exact(cfg, mode, method, n):
    """Megatron's --recompute-method block / uniform with --recompute-num-layers N and
    torchtitan's every-N-th-block checkpointing, through torch.utils.checkpoint on the
    reference model: exact (the shared rotary tables stay saved by a block that is not
    recomputed)."""
    work = W(recompute=mode, recompute_method=method, recompute_layers=n)
    assert engine(cfg, work) == hooked(cfg, work)


def test_partial_recompute_between_none_and_full(cfg):
    none, full = engine(cfg, W()), engine(cfg, W(recompute="full"))
    parts = [engine(cfg, W(recompute="full", recompute_layers=n)) for n in (1, 2, 3)]
    assert none > parts[0] > parts[1] > parts[2] > full


def test_live_bytes_agree_with_hooks(cfg):
    """The live-storage measurement equals saved_tensors_hooks' where both apply (+ the
    scalar loss, which the hooks do not see as saved)."""
    assert live(cfg, W()) == hooked(cfg, W()) + 4


@pytest.mark.parametrize("n", [0, 2])
def test_op_level_checkpointing_exact(cfg, n):
    """torchtitan's op-level selective checkpointing (the outputs of the 1st, 3rd, 5th and
    7th Linear and of the fused attention kernel with its logsumexp, per block), run as
    torchtitan runs it (non-reentrant checkpoint with its policy). Its cache is invisible to
    saved_tensors_hooks: measured as live storages against full recompute, whose own bytes
    the hooks prove (the reference's per-forward context, kept alive by the checkpoints'
    closures, is the same in both)."""
    op, full = W(recompute="op", recompute_layers=n), W(recompute="full", recompute_layers=n)
    assert engine(cfg, full) == hooked(cfg, full)
    assert live(cfg, op) - live(cfg, full) == engine(cfg, op) - engine(cfg, full)
    assert engine(cfg, full) < engine(cfg, op) < engine(cfg, W())


def test_bad_recompute_inputs():
    with pytest.raises(WorkloadError, match="recompute_method 'uniform'.*'selective'"):
        Workload(recompute="selective", recompute_method="uniform", recompute_layers=2)
    with pytest.raises(WorkloadError, match=r"recompute_layers \(-1\)"):
        Workload(recompute="full", recompute_layers=-1)
    with pytest.raises(WorkloadError, match="fused"):
        Workload(fused=("rope",))
    with pytest.raises(WorkloadError, match="recompute_method"):
        Workload(recompute_method="sometimes")
