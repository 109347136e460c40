"""Parallel layouts: activation memory vs Korthikanti et al., pipeline schedule figures, the
per-GPU model against the single-GPU engine, the catalog and the device profile."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

import txcalc
from txcalc.engine.hardware import get_gpu, load_catalog
from txcalc.engine.memory import TrainingMemory
from txcalc.train.setting import TrainSetting, group_activations, group_ops
from txcalc.train.evaluate import evaluate_layouts
from txcalc.parallel.layout import Layout
from txcalc.parallel.sharding import assign_stages, local_params, stage_blocks
from txcalc.engine.workload import Workload


# --- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
# Models", arXiv:2205.05198: activation bytes per layer, 16-bit activations, 1-byte dropout
# masks, softmax in 16-bit, GELU: the engine set to Megatron's kernels. Exact, plus the two
# LayerNorms' fp32 statistics (16 bytes per token; split over t only with SP).
def _megatron_setting():
    cfg = txcalc.load("gpt2").replace(activation="gelu_tanh")  # dropout 0.1 everywhere
    return TrainSetting(cfg, get_gpu("a100"), seq=1024, global_batch=8, precision="fp16-mixed",
                        attn_impl="eager", dropout=True, softmax_fp32=False)


def _layer_bytes(t: int, sp: bool, recompute: str = "none") -> int:
    s = _megatron_setting()
    groups, block_group, _, _ = group_ops(s)
    return group_activations(s, groups[block_group[5]], t, sp, recompute, 2)


S, B, H, A = 1024, 2, 768, 12


@pytest.mark.parametrize("t", [1, 2, 4, 12])
def test_korthikanti_tensor_parallel(t):
    """Eq. 3 (section 4.2.1): sbh(10 + 24/t + 5as/(ht))."""
    expected = S * B * H * (10 + 24 / t + 5 * A * S / (H * t)) + 16 * S * B
    assert _layer_bytes(t, False) == expected


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_tensor_and_sequence_parallel(t):
    """Eq. 4 (section 4.2.2): sbh(34/t + 5as/(ht))."""
    expected = S * B * H * (34 / t + 5 * A * S / (H * t)) + 16 * S * B / t
    assert _layer_bytes(t, True) == expected


@pytest.mark.parametrize("t", [1, 4])
def test_korthikanti_selective_recompute(t):
    """Eq. 6 (section 5): with selective recompute, sbh(34/t)."""
    expected = S * B * H * 34 / t + 16 * S * B / t
    assert _layer_bytes(t, t > 1, "selective") == expected


def test_korthikanti_first_stage_holds_p_microbatches():
    """Section 4.2.3: under 1F1B the first stage stores p micro-batches of its L/p layers, so
    its activations are L layers' worth whatever p (plus the embedding's own tensors)."""
    s = _megatron_setting()
    groups, block_group, first, _ = group_ops(s)
    embed = group_activations(s, first, 4, True, "selective", 2)
    per_layer = _layer_bytes(4, True, "selective")
    for pp in (2, 3, 4):
        r = evaluate_layouts(s, [Layout(tp=4, sp=True, pp=pp, micro_batch=2, dp=1,
                                        recompute="selective")], stages=lambda pp: [0])
        assert r["activations_bytes"][0] == pp * (12 // pp * per_layer + embed)


# --- pipeline schedules: Narayanan et al. 2021 (arXiv:2104.04473), section 2.2 ---------------
@pytest.mark.parametrize("pp,v,m", [(4, 1, 8), (4, 2, 8), (8, 1, 64), (2, 4, 4)])
def test_bubble_fraction(pp, v, m):
    """1F1B: (p - 1)/m; interleaved with v chunks per stage: (p - 1)/(v m)."""
    s = TrainSetting(txcalc.load("llama-3-8b"), get_gpu("h100"), 4096, m)
    lay = Layout(pp=pp, virtual=v, schedule="interleaved" if v > 1 else "1f1b", micro_batch=1)
    r = evaluate_layouts(s, [lay])
    assert r["bubble_fraction"][0] == pytest.approx((pp - 1) / (v * m))
    assert r["micro_batches"][0] == m


# --- the per-GPU model against the single-GPU engine ---------------------------------------------
@pytest.mark.parametrize("model,recompute", [("llama-3-8b", "none"), ("gpt2", "selective"),
                                             ("mixtral-8x7b", "full"), ("t5-small", "none")])
def test_one_gpu_layout_equals_engine(model, recompute):
    """tp = pp = dp = 1: every category equals TrainingMemory's (the optimizer's step
    counters included on both sides: the engine's one table, OPTIMIZER_SPECS)."""
    cfg = txcalc.load(model)
    s = TrainSetting(cfg, get_gpu("h100"), 512, 2, attn_impl="eager")
    r = evaluate_layouts(s, [Layout(micro_batch=2, recompute=recompute)])
    mem = TrainingMemory(cfg, Workload(batch=2, seq=512, recompute=recompute), "bf16-mixed",
                         "adamw")
    assert r["weights_bytes"][0] == mem.weights
    assert r["gradients_bytes"][0] == mem.gradients
    assert r["optimizer_bytes"][0] == mem.optimizer_total
    assert r["activations_bytes"][0] == mem.activations
    assert r["logits_bytes"][0] == mem.logits_transient


@pytest.mark.parametrize("model", ["llama-3.1-405b", "gpt2", "mixtral-8x7b", "t5-base"])
def test_stages_partition_the_model(model):
    """Pipeline stages hold every block once; tp=1 parameters over the stages sum to the
    model's (a tied head adds one embedding copy on the last stage when pp > 1)."""
    cfg = txcalc.load(model)
    total = txcalc.params(cfg).total
    ops = txcalc.params(cfg).ops
    n_blocks = sum(d for _, d in cfg.stacks)
    for pp in (1, 2, 3, 5, min(16, n_blocks)):
        ranges = stage_blocks(n_blocks, pp)
        assert [b for r in ranges for b in r] == list(range(n_blocks))
        assert max(map(len, ranges)) - min(map(len, ranges)) <= 1
        stages = assign_stages(cfg, ops, pp)
        assert sum(local_params(op, 1) for st in stages for op in st) == total


def test_tensor_parallel_shards_sum_to_model():
    """Over t ranks the column/row/vocab shards add up to the whole (dims divide here)."""
    cfg = txcalc.load("llama-3-8b")
    ops = txcalc.params(cfg).ops
    total = txcalc.params(cfg).total
    for t in (2, 4, 8):
        local = sum(local_params(op, t) for op in ops)
        replicated = sum(op.params_total for op in ops if op.kind == "norm")
        assert t * (local - replicated) + replicated == total


@pytest.mark.parametrize("model", ["llama-2-70b", "deepseek-small"])
def test_screen_equals_every_stage(model):
    """The search screens the first, second, last and most-parameter stage: the fullest and
    the slowest one for uniform blocks and for dense-first MoE stacks (DeepSeek's 3 dense
    blocks, then MoE), so its totals equal the every-stage evaluation."""
    from txcalc.train.planner import layout_grid
    from txcalc.train.setting import shard_groups
    from txcalc.train.evaluate import build_tables, evaluate
    import numpy as np
    cfg = (txcalc.load("deepseek-v3").replace(n_layers=13, n_experts=16, top_k=2)
           if model == "deepseek-small" else txcalc.load(model))
    gpu = get_gpu("h100")
    s = TrainSetting(cfg, gpu, 4096, 256)
    g, axes = layout_grid(cfg, gpu, 4096, 256, 4096)
    pick = np.random.default_rng(0).choice(len(g["tp"]), 25, replace=False)
    sub = {k: v[pick] for k, v in g.items()}
    shard, shard_e = shard_groups(sub, gpu)
    screen = evaluate(s, build_tables(s, *axes, np.concatenate([shard, shard_e])), sub,
                      detail=False)
    from txcalc.train.planner import _layout_at
    exact = evaluate_layouts(s, [_layout_at(sub, i) for i in range(len(pick))])
    assert list(screen["total_bytes"]) == list(exact["total_bytes"])
    assert np.allclose(screen["step_time_s"], exact["step_time_s"])


# --- catalog and device profile --------------------------------------------------------------------
def test_catalog_rows():
    gpus = load_catalog()
    for name in ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "h800", "b200",
                 "mi300x", "l40s", "l4", "a10g", "rtx-4090"):
        g = gpus[name]
        assert g.source.startswith("https://")
        assert g.peak_flops["bf16"] >= g.peak_flops["tf32"] >= g.peak_flops["fp32"] > 0
        assert g.memory_bytes % 2**30 == 0
    # NVIDIA H100 SXM datasheet: 989 dense bf16 TFLOP/s (1,979 with sparsity), 3.35 TB/s
    h100 = get_gpu("H100")
    assert (h100.name, h100.peak("bf16"), h100.hbm_bytes_per_s) == ("h100-sxm", 989.5e12,
                                                                      3.35e12)
    assert h100.memory_bytes == 80 * 2**30


def test_unknown_gpu_suggests():
    from txcalc.engine.hardware import GpuError
    with pytest.raises(GpuError, match=r"unknown GPU 'h10'.*did you mean"):
        get_gpu("h10")


def test_device_profile_round_trip(tmp_path):
    from txcalc.engine.timing import DeviceProfile, ProfileError
    prof = DeviceProfile.from_gpu(get_gpu("h100")).replace(flop_efficiency={"matmul": 0.5})
    prof.save(tmp_path / "p.json")
    back = DeviceProfile.load(tmp_path / "p.json")
    assert back == prof and back.flop_efficiency["matmul"] == 0.5
    assert back.flop_efficiency["attention"] == prof.flop_efficiency["attention"]
    (tmp_path / "bad.json").write_text(json.dumps({"name": "x"}))
    with pytest.raises(ProfileError, match="bad.json"):
        DeviceProfile.load(tmp_path / "bad.json")
    with pytest.raises(ProfileError, match="matmul"):
        prof.replace(flop_efficiency={"matmul": 1.5})


def test_slower_profile_slows_the_plan():
    """A calibrated profile (efficiencies halved) doubles compute-bound step time."""
    from txcalc.train.planner import plan_train
    from txcalc.engine.timing import DeviceProfile
    cfg = txcalc.load("llama-3-8b")
    only = {"tp": 1, "pp": 1, "zero": 1, "micro_batch": 1, "recompute": "full"}
    base = plan_train(cfg, "h100", 10**12, gpus=64, only=only)
    prof = DeviceProfile.from_gpu(get_gpu("h100"))
    slow = prof.replace(flop_efficiency={k: v / 2 for k, v in prof.flop_efficiency.items()})
    half = plan_train(cfg, "h100", 10**12, gpus=64, profile=slow, only=only)
    assert half.best.layout == base.best.layout
    assert half.best.step_time_s == pytest.approx(2 * base.best.step_time_s, rel=0.1)


# --- communication volumes ------------------------------------------------------------------------
def test_tensor_parallel_all_reduces_per_layer():
    """Shoeybi et al. 2019 (Megatron-LM, arXiv:1909.08053), section 3: a Transformer layer
    under TP needs 2 all-reduces of the b x s x h activations in the forward pass and 2 in the
    backward (plus the vocab-parallel embedding's one each way here). Ring all-reduce sends
    2(t - 1)/t of the buffer per GPU (nccl-tests' bus-bandwidth factor)."""
    cfg = txcalc.load("gpt2-medium")
    s = TrainSetting(cfg, get_gpu("h100"), 1024, 8)
    t, b = 4, 2
    r = evaluate_layouts(s, [Layout(tp=t, micro_batch=b)])
    tp = r["comm"]["tp"]
    m, per_buffer = 8 // b, b * 1024 * cfg.d_model * 2
    assert tp[1][0] == m * 2 * (2 * cfg.n_layers + 1) * 2 * (t - 1) / t * per_buffer
    assert r["links"]["tp"][0] == "intra-node"


@pytest.mark.parametrize("zero,factor", [(0, 2), (1, 1), (2, 1)])
def test_data_parallel_gradient_volume(zero, factor):
    """ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054, section 7): plain DP all-reduces the
    gradients (2 Psi per GPU, Psi = gradient bytes), ZeRO-1/2 reduce-scatter the gradients and
    all-gather the updated weights (Psi + Psi): the same volume, in two halves."""
    cfg = txcalc.load("llama-3-8b")
    s = TrainSetting(cfg, get_gpu("h100"), 2048, 64)
    n = 16
    r = evaluate_layouts(s, [Layout(dp=n, zero=zero, micro_batch=2)])
    psi = 2 * txcalc.params(cfg).total  # bf16 gradients (and bf16 weights)
    sent = r["comm"]["dp"][1][0]
    assert sent == pytest.approx(2 * (n - 1) / n * psi)
    assert r["links"]["dp"][0] == "inter-node"  # 16 ranks do not fit in an 8-GPU node


def test_hybrid_shard_shards_inside_a_node():
    """FSDP HYBRID_SHARD: ZeRO-3 over the 8 GPUs of a node, replicas across nodes; the
    replicas then all-reduce the shard's gradients over the inter-node link."""
    cfg = txcalc.load("llama-3-8b")
    s = TrainSetting(cfg, get_gpu("h100"), 2048, 64)
    full, hybrid = (evaluate_layouts(s, [Layout(dp=64, zero=3, hybrid_shard=h)])
                    for h in (False, True))
    assert hybrid["weights_bytes"][0] > full["weights_bytes"][0]
    p8 = evaluate_layouts(s, [Layout(dp=8, zero=3)])
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert hybrid[key][0] == p8[key][0]
    assert hybrid["links"]["dp"][0] == "intra-node" and full["links"]["dp"][0] == "inter-node"


@settings(max_examples=25, deadline=None, derandomize=True)
@given(tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 3]),
       dp=st.sampled_from([1, 2, 4]), mb=st.sampled_from([1, 2]),
       rc=st.sampled_from(["none", "selective", "full"]), sp=st.booleans())
def test_more_sharding_never_costs_memory(tp, pp, dp, mb, rc, sp):
    """Invariants: each ZeRO stage holds no more model states than the one before; recompute
    full holds no more activations than selective, selective no more than none."""
    cfg = txcalc.load("gpt2-medium")
    s = TrainSetting(cfg, get_gpu("a100"), 1024, 8)
    sp = sp and tp > 1
    lays = [Layout(tp=tp, pp=pp, dp=dp, zero=z, micro_batch=mb, recompute=rc, sp=sp)
            for z in range(4)]
    r = evaluate_layouts(s, lays)
    states = [r["weights_bytes"][i] + r["gradients_bytes"][i] + r["optimizer_bytes"][i]
              for i in range(4)]
    assert all(a >= b for a, b in zip(states, states[1:]))
    acts = evaluate_layouts(s, [Layout(tp=tp, pp=pp, dp=dp, micro_batch=mb, recompute=x, sp=sp)
                                for x in ("none", "selective", "full")])["activations_bytes"]
    assert acts[0] >= acts[1] >= acts[2]
