"""One GPU (tp = pp = dp = 1): ``plan train``'s per-GPU bytes by category equal the engine's
(``txcalc memory``, TrainingMemory) for every fine-tuning mode, LM loss and recompute mode,
byte for byte. The sibling of test_stacks_recompute's
``test_one_gpu_plan_activations_equal_memory_for_every_stack``.

The planner reads the engine's rules (held.held_inputs, memory.loss_transient,
memory.dequant_buffer_bytes) instead of re-deriving them; the engine's phases, which the same
rules build, are checked against MemTracker and saved_tensors_hooks in tests/test_finetune*.py
and tests/conformance/test_memory_phases.py (the loss kernels of the stacks in tests/conformance/test_loss_kernels.py).
Categories:

    planner     | engine (TrainingMemory)
    ------------|---------------------------------------------------------------------
    weights     | weights (a QLoRA base in NF4)
    gradients   | gradients (trainable parameters only)
    optimizer   | optimizer_total (states, fp32 master, step counters)
    activations | activations (saved for backward)
    inputs      | held_inputs_bytes: a frozen table's ids and leaf, unsaved labels, the loss
    logits      | max(logits_transient, dequant_bytes): the loss's largest transient, its
                |   kernel's (lm_loss.full_loss_extra: HF's full loss two fp32 T x V buffers,
                |   8 T V; Megatron's in-place vocab-parallel kernel a T V) or the largest
                |   dequantised weight
    recompute   | max(0, recompute_bytes - tail_saved - logits): full recompute's block
                |   rerun in backward, once the head's and the loss's saved tensors are gone

The full loss's transient depends on the stack's cross-entropy kernel (``Stack.loss_kernel``):
HF's 8 T V as backward starts, exact against MemTracker on HF-style code, is what ``memory``
and ``plan train`` book without a stack; with ``--stack megatron`` both book the in-place
kernel's (which keeps Megatron-LM's CI goldens in tests/published/test_training_validation.py within
10 %, where HF's rule put them up to +37 % over).
"""

import dataclasses

import pytest

import txcalc
from txcalc.engine.finetune import Finetune
from txcalc.engine.hardware import get_gpu
from txcalc.engine.memory import TrainingMemory
from txcalc.train.setting import TrainSetting
from txcalc.train.evaluate import evaluate_layouts
from txcalc.parallel.layout import Layout
from txcalc.engine.stacks import STACKS
from txcalc.engine.saved import tail_saved
from txcalc.engine.workload import Workload
from txcalc.train.planner import CATEGORIES as CATEGORIES_ALL

FINETUNES = {
    "full": None,
    "lora-all-linear": Finetune("lora", 16),
    # the unsloth recipe's in-place MLP kernel: no MLP backward transient in the rerun
    "lora-mlp-inplace": Finetune("lora", 16, mlp_inplace=True),
    "lora-qv": Finetune("lora", 8, targets="q_proj,v_proj", lora_dropout=0.1),
    "qlora": Finetune("qlora", 64),
    "dora": Finetune("dora", 8, targets="q_proj,v_proj"),
    "freeze-last2-head": Finetune("freeze", trainable="last:2,head"),
    "freeze-head": Finetune("freeze", trainable="head"),
}
LOSSES = ("full", "chunked", "fused-linear")
RECOMPUTES = ("none", "selective", "full")
#: a dense GQA llama, an MHA one, one with tied embeddings; (micro-batch, seq): batch 2 makes
#: the chunked loss copy its chunks (labels then held beside the saved tensors)
MODELS = {"llama-3-8b": (1, 4096), "llama-2-7b": (2, 512), "llama-3.2-1b": (2, 1024)}
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "inputs", "logits",
              "recompute")


def _both(model, ft, loss, recompute):
    cfg = txcalc.load(model)
    batch, seq = MODELS[model]
    s = TrainSetting(cfg, get_gpu("h200"), seq, batch, finetune=ft, loss=loss)
    r = evaluate_layouts(s, [Layout(micro_batch=batch, recompute=recompute)])
    m = TrainingMemory(cfg, Workload(batch=batch, seq=seq, attn_impl="flash", loss=loss,
                                     recompute=recompute), "bf16-mixed", "adamw", ft)
    return {k: int(r[f"{k}_bytes"][0]) for k in CATEGORIES}, _engine(m), m, r


def _engine(m: TrainingMemory) -> dict:
    """The engine's sizes in the planner's categories."""
    out = {"weights": m.weights, "gradients": m.gradients, "optimizer": m.optimizer_total,
           "activations": m.activations, "inputs": m.held_inputs_bytes,
           "logits": max(m.logits_transient, m.dequant_bytes)}
    # full recompute's block rerun (with the dequantised weight), after the head's and the
    # loss's saved tensors are freed, above the logits transient it follows
    out["recompute"] = max(0, m.recompute_bytes - tail_saved(m.ops, m.work, m._bytes.act)
                           - out["logits"]) if m.recompute_bytes else 0
    return out


@pytest.mark.parametrize("model", sorted(MODELS))
def test_one_gpu_plan_equals_memory_for_every_finetune_loss_and_recompute(model):
    """Every fine-tuning mode x loss x recompute mode on one GPU: 0 bytes apart in every
    category (all 72 combinations of a model in one test, collected so that a failure lists
    each disagreement)."""
    wrong = {}
    for name, ft in FINETUNES.items():
        for loss in LOSSES:
            for recompute in RECOMPUTES:
                planner, engine, _, _ = _both(model, ft, loss, recompute)
                diff = {k: planner[k] - engine[k] for k in CATEGORIES if planner[k] != engine[k]}
                if diff:
                    wrong[(name, loss, recompute)] = diff
    assert not wrong


@pytest.mark.parametrize("model", sorted(MODELS))
def test_one_gpu_plan_total_covers_the_engine_peak(model):
    """The planner books its categories as if all were alive at once; on one GPU their sum is
    the engine's peak over the step (TrainingMemory.total: its phases, checked against
    MemTracker in tests/conformance/test_memory_phases.py and, for the rerun, in
    test_recompute_transient.py) or above it by at most the gradients (whole at every point
    of the planner, growing through the engine's backward), for every fine-tuning mode, loss
    and recompute mode. Before the "recompute" category the planner's sum fell below the
    peak under full recompute wherever the rerun block outweighed the loss's transient (a
    fused or chunked loss: llama-3-8b, LoRA, fused-linear, 4,096 tokens: a 339 MiB rerun)."""
    below, above = {}, {}
    for name, ft in FINETUNES.items():
        for loss in LOSSES:
            for recompute in RECOMPUTES:
                _, _, m, r = _both(model, ft, loss, recompute)
                plan = sum(int(r[f"{k}_bytes"][0]) for k in CATEGORIES_ALL if k != "framework")
                if plan < m.total:
                    below[(name, loss, recompute)] = m.total - plan
                elif plan - m.total > m.gradients:
                    above[(name, loss, recompute)] = plan - m.total - m.gradients
    assert not below and not above


def test_the_compared_categories_carry_what_the_planner_used_to_miss():
    """The equalities above could not pass by both sides missing the same bytes: at llama-3-8b,
    4,096 tokens, LoRA and the full loss, the engine's inputs hold the frozen table's ids and
    leaf and the loss scalar (the planner booked none of them before); a QLoRA model's largest
    dequantised weight (an MLP matrix in bf16) is what the planner books on a stage without
    the head (it booked nothing before)."""
    cfg = txcalc.load("llama-3-8b")
    T, E, V = 4096, cfg.d_model, cfg.vocab_size
    planner, engine, m, _ = _both("llama-3-8b", FINETUNES["lora-all-linear"], "full", "none")
    assert planner["inputs"] == engine["inputs"] == 8 * T + T * E * 2 + 4  # 33,587,204 B
    # HF's kernel: the nll's and the log-softmax's fp32 gradients (the planner booked one)
    assert planner["logits"] == engine["logits"] == 8 * T * V  # 4,202,692,608 B
    assert m._loss_temp("backward") == 8 * T * V
    assert m.peak_phase == "peak_backward"  # the 8 T V buffers hold the step's peak here
    # full recompute: block 0's checkpoint is the leaf itself, so only the ids stay beside it
    planner, engine, _, _ = _both("llama-3-8b", FINETUNES["lora-all-linear"], "full", "full")
    assert planner["inputs"] == engine["inputs"] == 8 * T + 4
    # fused-linear saves no labels: the caller's stay alive beside the saved tensors
    planner, engine, _, _ = _both("llama-3-8b", None, "fused-linear", "none")
    assert planner["inputs"] == engine["inputs"] == 8 * T + 4
    # QLoRA on two pipeline stages: stage 0 (no head) books the dequantised down_proj
    s = TrainSetting(cfg, get_gpu("h200"), T, 2, finetune=FINETUNES["qlora"])
    r = evaluate_layouts(s, [Layout(pp=2)], stages=lambda pp: [0])
    assert int(r["logits_bytes"][0]) == cfg.d_model * cfg.d_ff * 2 \
        == TrainingMemory(cfg, Workload(batch=1, seq=T), finetune=FINETUNES["qlora"]).dequant_bytes


@pytest.mark.parametrize("stack", sorted(STACKS))
@pytest.mark.parametrize("model", ["llama-2-7b", "llama-3.2-1b"])
def test_one_gpu_plan_equals_memory_for_every_stack_loss_kernel(stack, model):
    """The full loss under every stack's cross-entropy kernel (HF's, Megatron's vocab_parallel,
    nanotron's sharded, torchtitan's compiled): the planner with the stack and the engine with
    the same workload, 0 bytes apart in every category, LoRA and full fine-tuning; and the
    logits category is the kernel's own, not HF's, where the kernel differs."""
    from txcalc.engine.lm_loss import full_loss_extra, loss_kernel
    from txcalc.engine.stacks import get_stack
    cfg = txcalc.load(model)
    batch, seq = MODELS[model]
    st = get_stack(stack)
    for ft in (None, FINETUNES["lora-all-linear"]):
        s = TrainSetting(cfg, get_gpu("h200"), seq, batch, finetune=ft, attn_impl=st.attn_impl,
                         softmax_fp32=st.softmax_fp32, fused=st.fused, keeps=st.keeps,
                         loss_kernel=st.loss_kernel)
        r = evaluate_layouts(s, [Layout(micro_batch=batch)])
        w = Workload(batch=batch, seq=seq, attn_impl=st.attn_impl, softmax_fp32=st.softmax_fp32,
                     fused=st.fused, keeps=st.keeps, loss_kernel=st.loss_kernel)
        m = TrainingMemory(cfg, w, "bf16-mixed", "adamw", ft)
        engine = _engine(m)
        assert {k: int(r[f"{k}_bytes"][0]) for k in CATEGORIES} == engine
        fwd, bwd = full_loss_extra(loss_kernel(w), batch * seq, cfg.vocab_size, 2)
        assert engine["logits"] >= max(fwd, bwd) > 0
        assert m._loss_temp("backward") == bwd
    hf = max(full_loss_extra("hf", batch * seq, cfg.vocab_size, 2))
    assert (engine["logits"] < hf) == (loss_kernel(w) != "hf")


@pytest.mark.parametrize("argv", [
    ["--finetune", "freeze", "--trainable", "last:2", "--loss", "full"],
    ["--finetune", "qlora", "--loss", "chunked", "--recompute", "full"],
    ["--finetune", "lora", "--loss", "full", "--stack", "megatron"],
    ["--finetune", "freeze", "--trainable", "last:2", "--stack", "nanotron"],
], ids=["freeze-full", "qlora-chunked-full", "lora-full-megatron", "freeze-nanotron"])
def test_plan_train_cli_one_gpu_equals_memory_json(argv, big_gpu):
    """The CLI paths (``plan train --gpus 1 --zero 0`` and ``memory --json``): the same bytes in
    every category the two share, the held inputs and the logits gradient included."""
    import json

    from typer.testing import CliRunner

    from txcalc.cli import app

    def run(args):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)
    recompute = [] if "--recompute" in argv else ["--recompute", "none"]
    mem = run(["memory", "llama-3.2-1b", "--batch", "2", "--seq", "1024", *argv, *recompute,
               "--json"])
    plan = run(["plan", "train", "llama-3.2-1b", "--gpu", "big", "--gpu-file", big_gpu,
                "--gpus", "1", "--zero", "0", "--micro-batch", "2", "--seq", "1024",
                "--tokens", "2048", *argv, *recompute, "--recipe", "hf-peft", "--json"])
    # plan train takes a recipe only when asked; memory's default when fine-tuning is hf-peft
    best = plan["best"]["memory_bytes"]
    assert mem["inputs_bytes"] > 4 and mem["logits_bytes"] > 0
    for k in ("weights", "gradients", "optimizer", "activations", "inputs", "logits"):
        assert best[k] == mem[f"{k}_bytes"], k


def test_held_inputs_split_over_pipeline_stages():
    """On two pipeline stages stage 0 books the frozen table's ids and leaf once per
    micro-batch in flight (1F1B: two), the last stage the labels and the loss of one
    (held.held_inputs' first and last)."""
    from txcalc.engine.held import held_inputs
    cfg = txcalc.load("llama-3.2-1b")
    ft = FINETUNES["lora-all-linear"]
    s = TrainSetting(cfg, get_gpu("h200"), 1024, 4, finetune=ft, loss="fused-linear")
    h = held_inputs(cfg, s.ops, s.work(1), 2, True)
    assert h.ids == 8 * 1024 and h.leaf == 1024 * cfg.d_model * 2 and h.labels == 8 * 1024
    r = evaluate_layouts(s, [Layout(pp=2)], stages=lambda pp: [0])
    assert int(r["inputs_bytes"][0]) == 2 * h.first
    r = evaluate_layouts(s, [Layout(pp=2)], stages=lambda pp: [1])
    assert int(r["inputs_bytes"][0]) == h.last


@pytest.mark.parametrize("ft", ["full", "qlora"])
def test_a_stage_without_the_head_books_the_whole_rerun(ft):
    """Pipeline stage 0 of two (no head, no loss): under full recompute its backward reruns a
    block beside every checkpoint, and the planner books that block whole (the engine's
    recompute_bytes over the whole model: every block alike), above the largest dequantised
    weight where the base is quantised (the rerun's own dequantised weight is in both)."""
    cfg = txcalc.load("llama-3-8b")
    T = 4096
    finetune = FINETUNES[ft if ft == "qlora" else "full"]
    s = TrainSetting(cfg, get_gpu("h200"), T, 1, finetune=finetune)
    r = evaluate_layouts(s, [Layout(pp=2, recompute="full")], stages=lambda pp: [0])
    m = TrainingMemory(cfg, Workload(batch=1, seq=T, attn_impl="flash", recompute="full"),
                       finetune=finetune)
    assert m.recompute_bytes > 0 and int(r["recompute_bytes"][0]) == \
        m.recompute_bytes - m.dequant_bytes
    assert int(r["logits_bytes"][0]) == m.dequant_bytes


def test_the_rerun_holds_the_mlp_gradients_unless_the_kernel_works_in_place():
    """llama-3-8b, LoRA, 4,096 tokens, bf16, full recompute: the rerun block's MLP backward
    holds the gradient arriving at act(gate) * up and those for gate and up, 3 x 14,336 x 2
    bytes a token, less what the ops after it saved, freed by then (down_proj's adapter:
    lora_A's input, 14,336 x 2, and lora_B's, 16 x 2): 57,312 bytes a token; an in-place kernel (the unsloth recipe's, Finetune.mlp_inplace) holds none of it, and the
    planner books what the engine books either way."""
    from txcalc.engine.saved import mlp_backward_transient
    cfg = txcalc.load("llama-3-8b")
    w = Workload(batch=1, seq=4096, attn_impl="flash", loss="fused-linear", recompute="full")
    m = [TrainingMemory(cfg, w, "bf16-mixed", "adamw", Finetune("lora", 16, mlp_inplace=i))
         for i in (False, True)]
    per = mlp_backward_transient(m[0].ops, Workload(batch=1, seq=4096, attn_impl="flash"), 2)
    assert set(per.values()) == {4096 * 57312}
    assert m[0].recompute_bytes - m[1].recompute_bytes == 4096 * 57312
    for ft in (Finetune("lora", 16), Finetune("lora", 16, mlp_inplace=True)):
        planner, engine, _, _ = _both("llama-3-8b", ft, "fused-linear", "full")
        assert planner["recompute"] == engine["recompute"] > 0


def test_the_mlp_transient_is_one_blocks_and_where_the_kernel_patches():
    """Uniform recompute reruns N blocks at once (their saved tensors together) but runs one
    MLP backward at a time: N x the saved part, the MLP transient once. The unsloth recipe's
    kernel patches only a gated MLP with LoRA on gate, up and down and no dropout or DoRA
    (unsloth's patch_peft_model): elsewhere the transient stays. A MoE block's shared MLP
    keeps its transient; routed experts are not modelled."""
    from txcalc.engine.saved import mlp_backward_transient, recompute_parts
    cfg = txcalc.load("llama-3.2-1b")
    base = dict(batch=1, seq=2048, attn_impl="flash", recompute="full")
    ft = Finetune("lora", 16)
    m = TrainingMemory(cfg, Workload(**base), finetune=ft)
    block, mlp = recompute_parts(m.ops, m.work, 2)
    grad_out = 2048 * cfg.d_model * 2
    w4 = Workload(**base, recompute_method="uniform", recompute_layers=4)
    uni = recompute_parts(m.ops, w4, 2)
    # four blocks' saved tensors (a group's later blocks keep no checkpoint of their own),
    # one MLP transient
    assert mlp > 0 and uni[1] == mlp and (uni[0] - grad_out) % 4 == 0
    assert uni[0] - grad_out >= 4 * (block - grad_out)
    assert TrainingMemory(cfg, w4, finetune=ft).recompute_bytes == sum(uni)

    def transient(finetune):
        mem = TrainingMemory(cfg, Workload(**base), finetune=finetune)
        return mem._recompute_parts[1]
    assert transient(Finetune("lora", 16, mlp_inplace=True)) == 0
    for kept in (Finetune("lora", 16, targets="q_proj,v_proj", mlp_inplace=True),
                 Finetune("lora", 16, lora_dropout=0.05, mlp_inplace=True),
                 Finetune("dora", 16, mlp_inplace=True)):
        assert transient(kept) > 0, kept
    scout = txcalc.load("llama-4-scout")
    w = Workload(batch=1, seq=1024, attn_impl="flash")
    ops = TrainingMemory(scout, dataclasses.replace(w, recompute="full")).ops
    per = mlp_backward_transient(ops, w, 2)
    # the shared expert's SwiGLU: 2 x its d_ff a token above its saved tensors
    assert per and set(per.values()) == {1024 * 2 * scout.shared_d_ff * 2}
