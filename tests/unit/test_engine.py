"""One source of truth: the planner's per-GPU evaluation, the CLI and the sharding plan sum the
engine's functions (memory.py, accounting.py) over sharded op rows and restate nothing.

- tp = pp = dp = 1: the planner equals TrainingMemory category by category over drawn configs
  of every model type x optimizer x precision x recompute mode x attention kernel.
- ``txcalc memory`` equals ``txcalc plan train --gpus 1 --zero 0`` for every preset.
- Sharding identities: over t TP ranks, p stages and d ZeRO-3 shards the local parameter,
  gradient and optimizer bytes add up to the whole (FSDP2's padding named and counted).
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import txcalc
from txcalc.engine.hardware import get_gpu
from txcalc.engine.memory import (OPTIMIZERS, PRECISIONS, TrainingMemory, grad_bytes,
                                  optimizer_bytes, weight_bytes)
from txcalc.train.setting import TrainSetting, shard_op
from txcalc.train.evaluate import evaluate_layouts
from txcalc.parallel.layout import Layout
from txcalc.parallel.sharding import (assign_stages, fsdp_padding, local_tensors,
                                      zero_shard_rows)
from txcalc.model.presets import PRESETS
from txcalc.engine.workload import ATTN_IMPLS, RECOMPUTE, Workload

from ..ref_configs import configs

EXAMPLES = int(os.environ.get("TXCALC_HF_EXAMPLES", "60"))
CATEGORIES = ("weights", "gradients", "optimizer", "activations", "logits")


def _one_gpu(cfg, batch, seq, precision, optimizer, recompute, attn):
    s = TrainSetting(cfg, get_gpu("h200"), seq, batch, precision=precision, optimizer=optimizer,
                     attn_impl=attn)
    r = evaluate_layouts(s, [Layout(micro_batch=batch, recompute=recompute)])
    mem = TrainingMemory(cfg, Workload(batch=batch, seq=seq, recompute=recompute,
                                       attn_impl=attn), precision, optimizer)
    engine = {"weights": mem.weights, "gradients": mem.gradients,
              "optimizer": mem.optimizer_total, "activations": mem.activations,
              "logits": mem.logits_transient}
    return {k: int(r[f"{k}_bytes"][0]) for k in CATEGORIES}, engine


@settings(max_examples=EXAMPLES, deadline=None, derandomize="TXCALC_HF_EXAMPLES" not in os.environ,
          suppress_health_check=list(HealthCheck))
@given(data=st.data(), family=st.sampled_from(["decoder", "encoder", "encoder-decoder"]),
       moe=st.booleans(), mla=st.booleans(), optimizer=st.sampled_from(OPTIMIZERS),
       precision=st.sampled_from(list(PRECISIONS)), recompute=st.sampled_from(RECOMPUTE),
       attn=st.sampled_from(ATTN_IMPLS))
def test_one_gpu_layout_equals_engine_drawn(data, family, moe, mla, optimizer, precision,
                                            recompute, attn):
    cfg = data.draw(configs(family=family, moe=moe, mla=mla))
    batch, seq = data.draw(st.integers(1, 3)), data.draw(st.integers(2, 48))
    planner, engine = _one_gpu(cfg, batch, seq, precision, optimizer, recompute, attn)
    assert planner == engine


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("recompute", RECOMPUTE)
def test_t5_small_one_gpu_equals_engine(optimizer, recompute):
    """The case that drifted: T5's checkpointed position bias (selective: 8,388,608 B; full:
    + the encoder output, 9,437,184 B) and the step counters of adafactor and adam8bit."""
    planner, engine = _one_gpu(txcalc.load("t5-small"), 2, 512, "bf16-mixed", optimizer,
                               recompute, "flash")
    assert planner == engine


def _json(argv):
    from typer.testing import CliRunner
    from txcalc.cli import app
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_cli_memory_equals_plan_train_one_gpu(name, big_gpu):
    """``txcalc memory`` and ``txcalc plan train --gpus 1 --zero 0`` answer the same question."""
    cfg = txcalc.load(name)
    seq = min(256, cfg.max_position) if cfg.pos_type == "learned" else 256
    # each preset under another (recompute, optimizer, kernel): every value of each is used
    i = sorted(PRESETS).index(name)
    recompute, optimizer = RECOMPUTE[i % 3], OPTIMIZERS[i % len(OPTIMIZERS)]
    common = ["--seq", str(seq), "--recompute", recompute, "--optimizer", optimizer,
              "--attn", ATTN_IMPLS[(i // 3) % 3], "--json"]
    mem = _json(["memory", name, "--batch", "2", *common])
    plan = _json(["plan", "train", name, "--gpu", "big", "--gpu-file", big_gpu, "--gpus", "1", "--zero", "0",
                  "--micro-batch", "2", "--tokens", str(2 * seq), *common])
    best = plan["best"]["memory_bytes"]
    for k in CATEGORIES:
        assert best[k] == mem[f"{k}_bytes"], k


@pytest.mark.parametrize("name", ["llama-3-8b", "gpt2", "mixtral-8x7b", "t5-small",
                                  "deepseek-v3"])
@pytest.mark.parametrize("optimizer", ["adamw", "adafactor", "adam8bit"])
def test_sharding_identities(name, optimizer):
    """Over t TP ranks the colwise/rowwise/vocab shards add up to the whole and replicated
    tensors appear t times; over p stages every op is held once (a tied head's copy named);
    over d ZeRO-3 ranks the unpadded dim-0 shards add up to each tensor, and d x rank 0's
    padded shard = the parameters + FSDP2's padding."""
    cfg = txcalc.load(name)
    ops = TrainingMemory(cfg, Workload(), "bf16-mixed", optimizer).ops
    whole = weight_bytes(ops, "fp32") // 4
    for t in (1, 2, 4):
        # per tensor: rank 0's shard is the ceil-divided dim (colwise/vocab: dim 0, rowwise:
        # dim 1) or the whole tensor (replicated); over the t ranks the split shards add up to
        # the tensor and replicated ones appear t times
        held = replicated = tp_padding = 0
        for op in ops:
            for (d0, rest, n), (l0, lrest, ln) in zip(local_tensors(op, 1), local_tensors(op, t)):
                assert n == ln
                if (l0, lrest) == (d0, rest):
                    replicated += d0 * rest * n
                    held += t * d0 * rest * n
                    continue
                dim, local = (d0, l0) if l0 != d0 else (rest, lrest)
                assert local == -(-dim // t)
                held += sum(zero_shard_rows(dim, t, r) for r in range(t)) * (d0 * rest // dim) * n
                tp_padding += (t * local - dim) * (d0 * rest // dim) * n
        assert held == whole + (t - 1) * replicated
        local = [shard_op(op, t, 1) for op in ops]
        assert t * sum(op.params_total for op in local) == whole + (t - 1) * replicated \
            + tp_padding
        assert grad_bytes(local, "bf16-mixed") == 2 * sum(op.params_total for op in local)
        if optimizer == "adamw":  # states shaped like the parameters; one step per tensor
            counters = 4 * sum(len(op.tensors()) for op in ops if op.params)
            assert (t * optimizer_bytes(local, "bf16-mixed", optimizer)
                    == (whole + (t - 1) * replicated + tp_padding) * 12 + t * counters)
    n_blocks = sum(d for _, d in cfg.stacks)
    for p in (2, min(4, n_blocks)):
        stages = assign_stages(cfg, ops, p)
        assert sorted(id(op) for st in stages for op in st) == sorted(id(op) for op in ops)
        assert sum(weight_bytes(st, "bf16") for st in stages) == weight_bytes(ops, "bf16")
    for d in (2, 3, 8):
        tensors = [x for op in ops for x in local_tensors(op, 1)]
        held = sum(zero_shard_rows(d0, d, r) * rest * n
                   for d0, rest, n in tensors for r in range(d))
        assert held == whole
        rank0 = sum(zero_shard_rows(d0, d, 0) * rest * n for d0, rest, n in tensors)
        assert d * rank0 == whole + fsdp_padding(tensors, d)


# --- issue 10 item 8: activations never grow when recompute does more -----------------------------
@settings(max_examples=EXAMPLES, deadline=None, derandomize="TXCALC_HF_EXAMPLES" not in os.environ,
          suppress_health_check=list(HealthCheck))
@given(cfg=configs(), attn=st.sampled_from(ATTN_IMPLS), batch=st.integers(1, 3),
       seq=st.integers(2, 48))
def test_recompute_never_keeps_more(cfg, attn, batch, seq):
    """none >= selective >= full, for every kernel (T5-style relative bias included)."""
    saved = [TrainingMemory(cfg, Workload(batch=batch, seq=seq, attn_impl=attn, recompute=r))
             .activations for r in RECOMPUTE]
    assert saved[0] >= saved[1] >= saved[2]


def test_t5_small_selective_below_none_under_flash():
    """Issue 10's figures: t5-small, batch 1, seq 512, flash. Selective keeps the position
    bias (checkpoint input, 8,388,608 B over the two stacks; measured with saved_tensors_hooks
    in tests/conformance/test_reference.py::test_relative_bias_kept_by_checkpoint); with no recompute the
    fused kernel keeps the same bias as its attn_mask (SDPA's memory-efficient kernel saves it
    for backward), which the engine omitted: none was 200,388,612 B, below selective's
    208,482,308 B. Now none = selective + the 18 cores' logsumexp (294,912 B)."""
    cfg = txcalc.load("t5-small")
    act = {r: TrainingMemory(cfg, Workload(batch=1, seq=512, attn_impl="flash", recompute=r))
           .activations for r in RECOMPUTE}
    assert act["selective"] == 208_482_308
    assert act["none"] == 200_388_612 + 2 * 8 * 512 * 512 * 2 == act["selective"] + 294_912


def test_t5_small_pytorch_keeps_more_without_recompute():
    """saved_tensors_hooks on reference/model.py, t5-small, batch 1 x 512, SDPA asked for the
    fused kernel (FakeTensorMode, CPU): with no recompute torch keeps more than under selective
    (the CPU kernels cannot take a mask that needs a gradient, so SDPA falls back to its math
    path: 319,729,668 B), and selective's bytes equal the engine's exactly. The engine's none
    models the fused (CUDA memory-efficient) kernel, which keeps the bias instead of S x S."""
    torch = pytest.importorskip("torch")
    from reference.measure import saved_under_fake
    cfg = txcalc.load("t5-small")
    measured = {}
    for r in ("none", "selective"):
        w = Workload(batch=1, seq=512, attn_impl="flash", recompute=r)
        measured[r] = sum(saved_under_fake(cfg, w, torch.bfloat16)[0].values())
    engine = {r: TrainingMemory(cfg, Workload(batch=1, seq=512, attn_impl="flash",
                                              recompute=r)).activations
              for r in ("none", "selective")}
    assert measured["selective"] == engine["selective"] == 208_482_308
    assert measured["none"] == 319_729_668 > engine["none"] > engine["selective"]


@pytest.mark.parametrize("name", ["mixtral-8x7b", "t5-small"])
def test_layout_grid_obeys_check_layout(name):
    """The grid's masks and check_layout share one set of joint rules (layout.joint_rules):
    every layout the planner's grid keeps passes check_layout."""
    from txcalc.train.planner import _layout_at, layout_grid
    from txcalc.parallel.layout import check_layout
    cfg = txcalc.load(name)
    g, _ = layout_grid(cfg, get_gpu("h100"), 2048, 64, 256)
    n = len(g["tp"])
    assert n > 100
    for i in range(0, n, max(1, n // 400)):
        check_layout(cfg, _layout_at(g, i), 2048)


# --- issue 10 item 8: ZeRO-3 never needs more than ZeRO-2 ------------------------------------------
TINY_EMBED = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, intermediate_size=256, vocab_size=32000,
                  tie_word_embeddings=False, max_position_embeddings=512)


def _fsdp2_zero2_zero3(_: int, out_dir: str) -> None:
    """FSDP2 on a fake process group of 8 under FakeTensorMode, an embedding-dominated tiny
    Llama: the per-rank peak (FSDPMemTracker) with reshard_after_forward True (ZeRO-3) and
    False (ZeRO-2), bf16 compute with fp32 shards and reduction, AdamW."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..fsdp_fake import fake_pg, fsdp2_peak

    cfg = LlamaConfig(**TINY_EMBED)
    cfg._attn_implementation = "sdpa"
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    with fake_pg(8):
        out = {"zero3" if reshard else "zero2":
               fsdp2_peak(lambda: LlamaForCausalLM(cfg), 8, 64, mp_policy=mp, reshard=reshard)
               for reshard in (True, False)}
    with open(os.path.join(out_dir, "zero.json"), "w") as f:
        json.dump(out, f)


def test_zero3_vs_zero2_fsdp2_fake_pg(tmp_path):
    """Issue 10's ZeRO-3 > ZeRO-2 (gpt2 with 2 blocks, dp 8: 1,845,006,625 > 1,844,118,712 B
    in the planner). FSDP2 itself never holds more under ZeRO-3 (measured here: the root
    unit's gathered buffer is real, but FSDP2's ZeRO-2 gathers as much). The planner's ZeRO-2
    matches FSDP2's gathered weights (Unsharded Param) and optimizer (fp32 shard + AdamW
    states and steps) byte for byte, and keeps bf16 gradient shards where FSDP2 keeps fp32
    ones (Sharded Grad = 2x): that gap, 2P/d, was the whole inversion. Fixed: ZeRO-2 counts
    fp32 gradient shards and ZeRO-1 full fp32 main gradients (evaluate.py's module table)."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    import torch.multiprocessing as mp
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    pytest.importorskip("torch.distributed._tools.fsdp2_mem_tracker")
    mp.spawn(_fsdp2_zero2_zero3, args=(str(tmp_path),), nprocs=1, join=True)
    got = json.loads((tmp_path / "zero.json").read_text())
    z2, z3 = got["zero2"], got["zero3"]
    assert z3["Total"] <= z2["Total"]

    from txcalc.model.hf import from_hf_dict
    cfg = from_hf_dict(dict(TINY_EMBED, model_type="llama"), "tiny-embed")
    s = TrainSetting(cfg, get_gpu("h100"), 64, 8)
    r = evaluate_layouts(s, [Layout(dp=8, zero=2)])
    assert (r["weights_bytes"][0], r["gradients_bytes"][0], r["optimizer_bytes"][0]) == (
        z2["Unsharded Param"], z2["Sharded Grad"], z2["Sharded Param"] + z2["OptState"])
    # and the planner no longer inverts them: ZeRO-3 <= ZeRO-2 per GPU, states and total
    r3 = evaluate_layouts(s, [Layout(dp=8, zero=3)])
    assert r3["total_bytes"][0] <= r["total_bytes"][0]


# every precision policy x optimizer: FSDP2's ZeRO-2 and ZeRO-3 byte for byte. A vocabulary of
# 32,001 rows makes FSDP2 pad the embedding and the head at every world size.
ODD_VOCAB = dict(TINY_EMBED, vocab_size=32001)
FSDP2_WORLDS = (2, 8)
FSDP2_POLICIES = ("fp32", "bf16", "bf16-mixed", "fp16-mixed")
FSDP2_OPTIMIZERS = ("adamw", "sgd", "none")
#: (world, policy, optimizer) measured: every policy and optimizer at 2 ranks (where the
#: padding outweighs ZeRO-1's gradient buffer without a master), and every policy with AdamW
#: at 8 (the padded all-gather of the odd vocabulary at 8 ranks; the optimizer's states are
#: sharded alike at any world size, and 16 fewer FSDP2 steps keep CI in its time)
FSDP2_CASES = tuple((w, p, o) for w in FSDP2_WORLDS for p in FSDP2_POLICIES
                    for o in FSDP2_OPTIMIZERS if w == 2 or o == "adamw")


def _fsdp2_policies(_: int, out_dir: str) -> None:
    """FSDPMemTracker's per-rank peak (one step outside the tracker, then a micro-batch that
    accumulates and the step) for each world size, policy, optimizer and reshard setting.
    Policies as FSDP2 runs them: fp32 and bf16 models with no MixedPrecisionPolicy (AdamW's
    states in the parameter dtype); bf16-/fp16-mixed: fp32 model, param_dtype bf16/fp16,
    reduce_dtype fp32. SGD with momentum 0.9; "none": gradients only (zero_grad on the model)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..fsdp_fake import fake_pg, fsdp2_peak

    cfg = LlamaConfig(**ODD_VOCAB)
    cfg._attn_implementation = "sdpa"
    out = {}

    def make_model(policy):
        torch.set_default_dtype(torch.bfloat16 if policy == "bf16" else torch.float32)
        try:
            model = LlamaForCausalLM(cfg)
        finally:
            torch.set_default_dtype(torch.float32)
        out["params"] = sum(p.numel() for p in model.parameters())
        return model

    for world in FSDP2_WORLDS:
        with fake_pg(world):
            for policy in FSDP2_POLICIES:
                mp = None
                if policy.endswith("-mixed"):
                    mp = MixedPrecisionPolicy(param_dtype={"bf16": torch.bfloat16,
                                                           "fp16": torch.float16}[policy[:4]],
                                              reduce_dtype=torch.float32)
                for optimizer in FSDP2_OPTIMIZERS:
                    if (world, policy, optimizer) not in FSDP2_CASES or (
                            policy.endswith("-mixed") and optimizer == "none"):
                        continue  # (a mixed policy with no optimizer reads the bf16 runs)
                    for reshard in (True, False):
                        key = f"{world}/{policy}/{optimizer}/{3 if reshard else 2}"
                        out[key] = fsdp2_peak(lambda: make_model(policy), world, 64,
                                              mp_policy=mp, reshard=reshard,
                                              optimizer=optimizer)
    with open(os.path.join(out_dir, "policies.json"), "w") as f:
        json.dump(out, f)


@pytest.fixture(scope="module")
def fsdp2_policies(tmp_path_factory) -> dict:
    pytest.importorskip("torch")
    import torch.distributed as dist
    import torch.multiprocessing as mp
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    pytest.importorskip("torch.distributed._tools.fsdp2_mem_tracker")
    out = tmp_path_factory.mktemp("fsdp2")
    mp.spawn(_fsdp2_policies, args=(str(out),), nprocs=1, join=True)
    return json.loads((out / "policies.json").read_text())


@pytest.mark.parametrize(("world", "precision", "optimizer"), FSDP2_CASES)
def test_zero2_zero3_equal_fsdp2_every_policy(world, precision, optimizer, fsdp2_policies):
    """Issue 10 item 8, every policy: the planner's ZeRO-2 and ZeRO-3 model states equal
    FSDP2's per-rank bytes at the peak, category by category.

    ZeRO-2: weights = the gathered parameters (FSDP2's padded all-gather output: at 8 ranks
    16,913,664 B in fp32 where P x 4 is 16,910,080) + the sharded parameter when it is not the
    fp32 master; gradients = the gradient shard (fp32 under mixed precision); optimizer = the
    fp32 master (FSDP2's sharded parameter) + states + steps. ZeRO-3: weights + gradients +
    optimizer = sharded parameter + gradient + states (and category by category without a
    master). With no optimizer the mixed policies have no master (memory.zero_bytes): FSDP2
    on a bf16 model (its fp32 shards under a MixedPrecisionPolicy are a master)."""
    from txcalc.model.hf import from_hf_dict
    from txcalc.engine.memory import zero_bytes
    no_master = precision.endswith("-mixed") and optimizer == "none"
    got = fsdp2_policies
    cfg = from_hf_dict(dict(ODD_VOCAB, model_type="llama"), "tiny-odd")
    s = TrainSetting(cfg, get_gpu("h100"), 64, world, precision=precision, optimizer=optimizer)
    r = evaluate_layouts(s, [Layout(dp=world, zero=z) for z in (2, 3)])
    ours = [{k: int(r[f"{k}_bytes"][i]) for k in ("weights", "gradients", "optimizer")}
            for i in range(2)]
    m2, m3 = (got[f"{world}/{'bf16' if no_master else precision}/{optimizer}/{z}"]
              for z in (2, 3))
    if zero_bytes(precision, optimizer).zero2_param_shard:  # no fp32 master
        assert ours[0] == {"weights": m2["Unsharded Param"] + m2["Sharded Param"],
                           "gradients": m2["Sharded Grad"], "optimizer": m2["OptState"]}
        assert ours[1] == {"weights": m3["Sharded Param"], "gradients": m3["Sharded Grad"],
                           "optimizer": m3["OptState"]}
    else:
        assert ours[0] == {"weights": m2["Unsharded Param"], "gradients": m2["Sharded Grad"],
                           "optimizer": m2["Sharded Param"] + m2["OptState"]}
        assert sum(ours[1].values()) == m3["Sharded Param"] + m3["Sharded Grad"] + m3["OptState"]
    # FSDP2's gathered parameters are the padded all-gather output: d x the sharded parameter
    unsharded_el = 4 if precision == "fp32" else 2
    sharded_el = 4 if precision == "fp32" or (precision.endswith("-mixed") and not no_master) \
        else 2
    assert m2["Unsharded Param"] // unsharded_el == world * m2["Sharded Param"] // sharded_el
    # FSDP2 itself never holds more under ZeRO-3
    assert m3["Total"] <= m2["Total"]
    if world == 2 and zero_bytes(precision, optimizer).zero2_param_shard:
        # why ZeRO-2 may exceed ZeRO-1 by FSDP2's padding at 2 ranks without a master (see
        # test_zero_stages_never_grow_per_gpu): the sharded parameter and gradient, half the
        # padded tensors each, outweigh one full gradient buffer (ZeRO-1's, g x P)
        g = PRECISIONS["bf16" if no_master else precision].grad
        assert m2["Sharded Param"] + m2["Sharded Grad"] > g * got["params"]


def _zero_totals(cfg, dp, precision, optimizer):
    s = TrainSetting(cfg, get_gpu("h100"), 1024, dp, precision=precision, optimizer=optimizer)
    r = evaluate_layouts(s, [Layout(dp=dp, zero=z) for z in range(4)])
    return [int(x) for x in r["total_bytes"]]


@pytest.mark.parametrize("layers", [1, 2, 4])
@pytest.mark.parametrize("dp", [1, 2, 4, 8, 64])
@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_zero_stages_never_grow_per_gpu(layers, dp, precision, optimizer):
    """Issue 10: each ZeRO stage holds no more per GPU than the one before, in total (gather
    buffers included), also for tiny embedding-dominated models (gpt2 with 2 blocks at dp 8
    was 1,845,006,625 B under ZeRO-3 against 1,844,118,712 B under ZeRO-2), for every
    precision policy and optimizer. At dp 1 every stage is ZeRO-0 (ZeRO-3 used to add gather
    buffers there: gpt2 with 2 blocks in fp32 2,822,562,305 B against 2,597,605,736 B).

    One exception, measured: at dp 2 with no fp32 master (fp32, pure bf16, or no optimizer)
    FSDP2's sharded parameter and gradient (half of each padded tensor) outweigh ZeRO-1's one
    full gradient buffer by FSDP2's padding (gpt2's 50,257-row table: one row);
    test_zero2_zero3_equal_fsdp2_every_policy measures it. There ZeRO-0 >= ZeRO-1 and
    ZeRO-2 >= ZeRO-3 still hold, ZeRO-2 and ZeRO-3 exceed ZeRO-1 by at most that padding in
    both copies (2 x w x padding, plus fragmentation), and with an even vocabulary (nothing
    to pad) the order holds throughout."""
    from txcalc.engine.memory import zero_bytes
    from txcalc.parallel.overheads import Overheads
    cfg = txcalc.load("gpt2").replace(n_layers=layers)
    totals = _zero_totals(cfg, dp, precision, optimizer)
    if dp == 2 and zero_bytes(precision, optimizer).zero2_param_shard:
        even = _zero_totals(cfg.replace(vocab_size=50258), dp, precision, optimizer)
        assert even == sorted(even, reverse=True), even
        assert totals[0] >= totals[1] and totals[2] >= totals[3], totals
        ops = TrainingMemory(cfg, Workload(), precision, optimizer).ops
        pad = fsdp_padding([x for op in ops for x in local_tensors(op, 1)], 2)
        assert pad == 768  # one row of wte
        excess = max(totals[2:]) - totals[1]
        w = PRECISIONS[precision].weight
        assert 0 < excess <= 2 * w * pad * (1 + Overheads().fragmentation) + 1, totals
    else:
        assert totals == sorted(totals, reverse=True), totals


@pytest.mark.parametrize("precision, fixed, sharded", [
    ("fp16-mixed", 4, 16), ("bf16-mixed", 6, 12), ("fp32", 8, 8)])
def test_zero1_equals_megatron_distributed_optimizer(precision, fixed, sharded):
    """ZeRO-1 is Megatron-LM's distributed optimizer (memory.ZERO_BYTES), whose published
    bytes per parameter with Adam over d data-parallel ranks (Megatron-LM
    docs/source/api-guide/distrib_optimizer.md) are fp16 4 + 16/d, bf16 with fp32 gradients
    6 + 12/d, fp32 8 + 8/d (step counters not counted there). gpt2 with a 50,304-row table: every
    tensor splits evenly over 8 ranks."""
    cfg = txcalc.load("gpt2").replace(n_layers=2, vocab_size=50304)
    d = 8
    s = TrainSetting(cfg, get_gpu("h100"), 1024, d, precision=precision, optimizer="adam")
    r = evaluate_layouts(s, [Layout(dp=d, zero=1)])
    ops = TrainingMemory(cfg, Workload(), precision, "adam").ops
    n = sum(op.params_total for op in ops)
    steps = 4 * sum(len(op.tensors()) for op in ops if op.params)
    states = sum(int(r[f"{k}_bytes"][0]) for k in ("weights", "gradients", "optimizer"))
    assert n % d == 0
    assert states - steps == n * fixed + n * sharded // d
