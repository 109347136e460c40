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
from txcalc.model.hf import from_hf_dict  # noqa: E402
from txcalc.engine.memory import TrainingMemory  # noqa: E402
from txcalc.engine.stacks import STACKS  # noqa: E402
from txcalc.engine.workload import FUSED_KERNELS, Workload, WorkloadError  # noqa: E402

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


@pytest.mark.parametrize("fused,recompute", [
    (("layers",), "none"), (("layers",), "full"), (("layers", "loss"), "none")])
def test_blocks_compiled_whole_keep_what_the_fused_kernels_keep(cfg, fused, recompute):
    """torchtune's compile_model compiles each decoder layer whole (Inductor partitions the
    block's forward and backward itself): what the compiled blocks keep for backward equals
    the engine's blocks with their norms and gated products fused ("layers"), the final norm
    eager, byte for byte; fewer bytes than eager blocks, more than fusing the final norm too
    (its eager fp32 copy and normalised input)."""
    work = W(fused=fused, recompute=recompute)
    assert engine(cfg, work) == hooked(cfg, work)
    if recompute == "none":
        D = TINY["hidden_size"]
        assert engine(cfg, W(fused=tuple(k for k in fused if k != "layers"))) > \
            engine(cfg, work) > engine(cfg, W(fused=fused + ("norm",)))
        assert engine(cfg, work) - engine(cfg, W(fused=fused + ("norm",))) == B * S * D * 4


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


# --- profiles ---------------------------------------------------------------------------------
def test_stack_table_is_consistent():
    from txcalc.engine.stacks import OVERLAPS, STACKS, get_stack
    from txcalc.engine.workload import ATTN_IMPLS
    from txcalc.engine.stacks import KEEPS
    assert set(STACKS) == {"hf-eager", "hf-sdpa", "torchtitan", "megatron", "deepspeed",
                           "nanotron"}
    for s in STACKS.values():
        assert s.attn_impl in ATTN_IMPLS and s.source
        assert set(s.fused) <= set(FUSED_KERNELS) and set(s.overlap) <= set(OVERLAPS)
        assert set(s.keeps) <= set(KEEPS)
    with pytest.raises(WorkloadError, match="unknown stack 'titan'.*torchtitan"):
        get_stack("titan")


def test_stack_saved_bytes_on_the_reference(cfg):
    """Each profile's kernels, as a workload, measured on the reference (hooks)."""
    from txcalc.engine.stacks import STACKS
    for s in STACKS.values():
        if s.attn_impl != "flash":
            continue  # hf-eager: eager attention, covered by tests/conformance/test_activations.py
        work = W(fused=s.fused)
        assert engine(cfg, work) == hooked(cfg, work), s.name


# --- 3. overlap -------------------------------------------------------------------------------
def _plan(model, gpu, **kw):
    from txcalc import load
    from txcalc.train.planner import plan_train
    return plan_train(load(model), gpu, int(15.6e12), n_rows=3, **kw)


LLAMA3_405B = dict(seq=8192, global_batch=2048, gpus=8192, only={"tp": 8, "pp": 16, "cp": 1})


def test_overlap_moves_seconds_from_exposed_to_hidden():
    """The same layout with every overlap off and on: each collective's seconds are the
    same, the exposed part shrinks (and hidden = time - exposed), and the step gets faster."""
    only = dict(LLAMA3_405B["only"], zero=1, recompute="full", micro_batch=1)
    kw = dict(LLAMA3_405B, only=only, stack="megatron")
    off, on = _plan("llama-3.1-405b", "h100", **kw, overlap="none").best, \
        _plan("llama-3.1-405b", "h100", **kw).best
    assert off.layout == on.layout
    for dim in ("tp", "pp", "dp"):
        a, b = off.communication[dim], on.communication[dim]
        assert a["time_s"] == pytest.approx(b["time_s"])
        assert a["exposed_s"] == pytest.approx(a["time_s"]) and a["hidden_s"] == 0
        assert b["exposed_s"] < a["exposed_s"]
        assert b["hidden_s"] == pytest.approx(b["time_s"] - b["exposed_s"])
    assert on.step_time_s < off.step_time_s


def test_bad_overlap_is_refused():
    with pytest.raises(WorkloadError, match=r"overlap \('tp,async'\) must list items of tp, "
                                            "param_gather, grad_reduce, pp"):
        _plan("llama-3-8b", "h100", overlap="tp,async")


# --- the two published runs -------------------------------------------------------------------
def test_llama3_405b_table4_partial_recompute_fits():
    """Grattafiori et al. 2024 (arXiv:2407.21783), Table 4: 405B on 8,192 H100s, TP 8, CP 1,
    PP 16, DP 64, seq 8192, 16M tokens a batch (2048 sequences), 43% BF16 MFU measured.
    txcalc before: no layout without recompute fits (HF's kernels), so full recompute only
    (30.7% MFU).
    With the megatron profile and partial recompute (full recompute of the first N blocks of
    each stage) the search finds a layout that fits in 80 GiB; MFU within 15% of the
    measured 43% (uncalibrated efficiencies)."""
    from txcalc.errors import PlanError
    p = _plan("llama-3.1-405b", "h100", **LLAMA3_405B, stack="megatron")
    b = p.best
    assert (b.layout.tp, b.layout.pp, b.layout.dp, b.layout.cp) == (8, 16, 64, 1)
    assert b.total_bytes <= 80 * 2**30
    assert b.layout.recompute == "full" and 0 < b.layout.recompute_layers < 8
    assert b.mfu == pytest.approx(0.43, rel=0.15)
    full = _plan("llama-3.1-405b", "h100", **dict(LLAMA3_405B, only=dict(
        LLAMA3_405B["only"], recompute="full")), stack="megatron").best
    assert full.layout.recompute_layers == 0 and full.mfu < b.mfu
    with pytest.raises(PlanError, match="does not fit"):  # HF's kernels, no recompute
        _plan("llama-3.1-405b", "h100", **dict(LLAMA3_405B, only=dict(
            LLAMA3_405B["only"], recompute="none")))


def test_llama2_13b_fsdp_no_checkpointing_fits_with_fused_norms():
    """Llama 2 13B, FSDP (ZeRO-3) on 64 A100-80GB, no activation checkpointing, micro-batch
    2 at 4096 tokens: with HF's eager kernels txcalc refuses it (84.8 GiB, its fp32 RMSNorms
    saving ~6 B a unit); with fused norms, SwiGLU and loss (the torchtitan profile) it fits."""
    from txcalc.errors import PlanError
    only = {"tp": 1, "pp": 1, "cp": 1, "zero": 3, "recompute": "none", "micro_batch": 2}
    with pytest.raises(PlanError, match="84.8 GiB"):
        _plan("llama-2-13b", "a100-80gb", seq=4096, gpus=64, only=only)
    b = _plan("llama-2-13b", "a100-80gb", seq=4096, gpus=64, only=only, stack="torchtitan").best
    assert b.total_bytes <= 80 * 2**30 and b.layout.recompute == "none"


def test_cli_stack_and_recompute_layers(capsys):
    import json

    from txcalc.cli import main
    rc = main(["plan", "train", "llama-3.1-405b", "--tokens", "15.6T", "--gpu", "h100",
               "--gpus", "8192", "--tp", "8", "--pp", "16", "--cp", "1", "--seq", "8192",
               "--global-batch", "2048", "--stack", "megatron", "--recompute", "full",
               "--recompute-layers", "2", "--json"])
    best = json.loads(capsys.readouterr().out)["best"]
    assert rc == 0 and best["layout"]["recompute_layers"] == 2
    assert best["communication"]["tp"]["hidden_s"] > 0
    for argv, name in ((["--stack", "jax"], "--stack"), (["--overlap", "tp,async"], "async")):
        rc = main(["plan", "train", "llama-3-8b", "--tokens", "1T", *argv])
        out = capsys.readouterr()
        assert rc == 2 and name in out.err and "Traceback" not in out.err
        assert len(out.err.strip().splitlines()) == 1


def test_offloaded_checkpoints_one_gpu_equal_engine():
    """Full recompute with its checkpoints in host memory: the planner's host bytes on one
    GPU are the engine's offloaded checkpoints (TrainingMemory offload "activations"), and
    the GPU's activations shrink by exactly that much."""
    import txcalc
    from txcalc.engine.hardware import get_gpu
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    from txcalc.parallel.layout import Layout
    cfg = txcalc.load("llama-3-8b")
    s = TrainSetting(cfg, get_gpu("h100"), 4096, 4)
    r = evaluate_layouts(s, [Layout(recompute="full"),
                             Layout(recompute="full", offload_checkpoints=True)])
    m = TrainingMemory(cfg, Workload(batch=1, seq=4096, attn_impl="flash", recompute="full"),
                       offload="activations")
    assert r["host_bytes"][1] == m.offloaded_activations > 0 and r["host_bytes"][0] == 0
    assert r["activations_bytes"][0] - r["activations_bytes"][1] == m.offloaded_activations


@pytest.mark.parametrize("stack", sorted(STACKS))
@pytest.mark.parametrize("model", ["llama-2-7b", "llama-3-8b"])  # MHA (qkv_copy), GQA
def test_one_gpu_plan_activations_equal_memory_for_every_stack(stack, model):
    """One GPU, no TP: the planner's activations under a framework profile equal the engine's
    TrainingMemory.activations with the same profile (``Workload.keeps``, ``fused``, the
    attention kernel), so ``memory --stack`` and ``plan train --stack`` agree; nanotron's
    copies (stacks.KEEPS) are counted by both."""
    import txcalc
    from txcalc.engine.hardware import get_gpu
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    from txcalc.parallel.layout import Layout
    st = STACKS[stack]
    cfg = txcalc.load(model)
    s = TrainSetting(cfg, get_gpu("h100"), seq=1024, global_batch=1, attn_impl=st.attn_impl,
                     softmax_fp32=st.softmax_fp32, fused=st.fused, keeps=st.keeps)
    m = TrainingMemory(cfg, Workload(batch=1, seq=1024, attn_impl=st.attn_impl,
                                     softmax_fp32=st.softmax_fp32, fused=st.fused,
                                     keeps=st.keeps))
    assert int(evaluate_layouts(s, [Layout()])["activations_bytes"][0]) == m.activations
    if stack == "nanotron":  # o_proj's copy in every block, and the MHA qkv thirds in llama-2
        plain = TrainingMemory(cfg, Workload(batch=1, seq=1024, attn_impl=st.attn_impl,
                                             softmax_fp32=st.softmax_fp32, fused=st.fused))
        per_block = 1024 * cfg.d_model * 2 * (1 + (model == "llama-2-7b") * 2)
        assert m.activations - plain.activations == cfg.n_layers * per_block


@pytest.mark.parametrize("name,config", [
    ("gpt2", dict(model_type="gpt2", n_embd=128, n_layer=2, n_head=4, vocab_size=512,
                  n_positions=1024)),
    ("gemma", dict(model_type="gemma", hidden_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                   intermediate_size=256, vocab_size=512, max_position_embeddings=4096))])
def test_blocks_compiled_whole_save_what_the_engine_takes_off(name, config):
    """Beyond Llama's blocks: GPT-2's (LayerNorm, gelu_new, learned positions) and Gemma's
    (a (1 + w) RMSNorm, GeGLU, MQA) compiled whole keep exactly the bytes fewer that the
    engine's "layers" takes off their eager blocks."""
    c = from_hf_dict(config, f"tiny-{name}")
    eager, comp = W(), W(fused=("layers",))
    assert hooked(c, eager) - hooked(c, comp) == engine(c, eager) - engine(c, comp) > 0
