"""A real distributed engine on CPU: per-rank bytes equal the planner's per-GPU prediction.

Two gloo ranks (forked here) train a tiny Llama (HF LlamaForCausalLM, vocab 1001 so that
every split is uneven) for one AdamW step, sharded two ways:

- FSDP2 ``fully_shard`` (each block, then the root): ZeRO-3 over dp = 2. FSDP2 splits dim 0
  of every tensor by ceiling division (501/500 rows) and pads storage to rank 0's size.
- DTensor ``parallelize_module``: q/k/v/gate/up ColwiseParallel, o/down RowwiseParallel,
  the embedding vocab-parallel (RowwiseParallel on an Embedding), lm_head ColwiseParallel.

Measured per rank: bytes of the unique storages behind the local parameter shards, the
gradients, and the optimizer state (exp_avg, exp_avg_sq, step); for FSDP2 also
FSDPMemTracker's sharded-parameter, sharded-gradient and optimizer-state bytes at the rank's
peak (a second micro-batch accumulating, then the step). That tiny model's peak falls in the
optimizer step (foreach temporaries, reduce-scatter buffers), which the planner does not
model: at full scale the activations set the peak (the fake-process-group test below). One torch detail is checked
apart: under TP, torch gives the embedding's gradient a Replicate placement (the full V x D
on every rank); that excess is asserted exactly and set aside. Predicted: the planner's
``evaluate_layouts`` for the same layout, fp32, AdamW. Rank 0 holds the largest shard and must
equal the prediction exactly; the other rank holds no more.
"""

from __future__ import annotations

import json
import os
import socket

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("transformers")

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=1001, tie_word_embeddings=False,
            max_position_embeddings=64)


def _storages_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for mode in ("fsdp", "tp"):
            _step(rank, world, mode, out_dir)
    finally:
        dist.destroy_process_group()


def _step(rank: int, world: int, mode: str, out_dir: str) -> None:
    """One AdamW step of the tiny model sharded by ``mode``; write this rank's bytes."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY))
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       parallelize_module)
        mesh = init_device_mesh("cpu", (world,))
        plan = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
                "lm_head": ColwiseParallel(output_layouts=Replicate())}
        for i in range(TINY["num_hidden_layers"]):
            p = f"model.layers.{i}."
            plan.update({p + "self_attn.q_proj": ColwiseParallel(),
                         p + "self_attn.k_proj": ColwiseParallel(),
                         p + "self_attn.v_proj": ColwiseParallel(),
                         p + "self_attn.o_proj": RowwiseParallel(),
                         p + "mlp.gate_proj": ColwiseParallel(),
                         p + "mlp.up_proj": ColwiseParallel(),
                         p + "mlp.down_proj": RowwiseParallel()})
        parallelize_module(model, mesh, plan)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, TINY["vocab_size"], (2, 16),
                        generator=torch.Generator().manual_seed(1))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    params = list(model.parameters())
    state = [_local(v) for s in opt.state.values() for v in s.values()]
    result = {"weights": _storages_bytes(_local(p) for p in params),
              "gradients": _storages_bytes(_local(p.grad) for p in params),
              "gradients_logical": sum(_local(p.grad).numel() * _local(p.grad).element_size()
                                       for p in params),
              "optimizer": sum(t.untyped_storage().nbytes() for t in state)}
    if mode == "fsdp":  # FSDPMemTracker: a second micro-batch accumulating, then the step
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((ids,))
        with tracker:
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
        result["tracker"] = {str(getattr(k, "value", k)): int(v) for k, v in peak.items()}
    with open(os.path.join(out_dir, f"{mode}-{rank}.json"), "w") as f:
        json.dump(result, f)


def forked(fn, args: tuple, nprocs: int) -> None:
    """Run ``fn(i, *args)`` in ``nprocs`` child processes forked from this one (each its own
    process group, as under ``mp.spawn``), joined; a child's exception fails the caller.
    Forked, not spawned: a spawned child imports torch, transformers and the test module again
    (6-9 CPU s a child); a forked one starts with what this process imported (imported here
    first). One intra-op thread a child: the tiny models gain nothing from more, and the
    children never enter an OpenMP team the parent may have left behind."""
    import torch.distributed.fsdp  # noqa: F401 (imported once, before the fork)
    import torch.multiprocessing as mp
    import transformers.models.llama.modeling_llama  # noqa: F401
    mp.start_processes(_one_thread, args=(fn, args), nprocs=nprocs, join=True,
                       start_method="fork")


def _one_thread(i: int, fn, args: tuple) -> None:
    torch.set_num_threads(1)
    fn(i, *args)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    """Both shardings, one fork of two gloo ranks: {mode: [rank 0, rank 1]}."""
    out = tmp_path_factory.mktemp("ranks")
    forked(_worker, (2, _free_port(), str(out)), nprocs=2)
    return {mode: [json.loads((out / f"{mode}-{r}.json").read_text()) for r in range(2)]
            for mode in ("fsdp", "tp")}


def _predicted(layout) -> dict:
    from transformers import LlamaConfig
    from txcalc.model.hf import from_hf_dict
    from txcalc.engine.hardware import get_gpu
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    cfg = from_hf_dict(LlamaConfig(**TINY).to_dict(), "tiny-llama")
    s = TrainSetting(cfg, get_gpu("h100"), seq=16, global_batch=2 * layout.dp,
                     precision="fp32", optimizer="adamw")
    r = evaluate_layouts(s, [layout])
    return {k: int(r[f"{k}_bytes"][0]) for k in ("weights", "gradients", "optimizer")}


needs_gloo = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")


@needs_gloo
@pytest.mark.parametrize("mode", ["fsdp", "tp"])
def test_rank_bytes_equal_prediction(mode, measured):
    from txcalc.parallel.layout import Layout
    layout = Layout(dp=2, zero=3, micro_batch=2) if mode == "fsdp" else Layout(tp=2,
                                                                                 micro_batch=2)
    ranks = [dict(r) for r in measured[mode]]
    predicted = _predicted(layout)
    if mode == "tp":
        # torch (2.13) gives the vocab-parallel embedding's gradient a Replicate placement: each
        # rank holds the full V x D gradient, not its Shard(0) rows (Megatron keeps it
        # sharded). Checked exactly, then set aside: the planner models the sharded gradient.
        V, D = TINY["vocab_size"], TINY["hidden_size"]
        for rank, r in enumerate(ranks):
            own_rows = 501 if rank == 0 else 500
            assert r["gradients"] == r["gradients_logical"]
            r["gradients"] -= (V - own_rows) * D * 4
    for rank, r in enumerate(ranks):
        r.pop("gradients_logical")
        tracked = r.pop("tracker", None)
        if tracked:  # FSDPMemTracker's categories at the per-rank peak say the same
            at_peak = {"weights": tracked["Sharded Param"], "gradients": tracked["Sharded Grad"],
                       "optimizer": tracked["OptState"]}
            assert at_peak == r, (rank, at_peak, r)
    assert ranks[0] == predicted, (ranks, predicted)
    for key in predicted:
        assert ranks[1][key] <= predicted[key]


# --- full scale without the memory: llama-3-8b, one rank of 8, fake process group -------------
def _fake_rank(_: int, out_dir: str) -> None:
    """FSDP2 (bf16 compute, fp32 shards and reduction) on a fake process group of 8 under
    FakeTensorMode: FSDPMemTracker's per-rank peak of a micro-batch that accumulates onto
    existing gradients, then the AdamW step (one step first, outside the tracker)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..fsdp_fake import fake_pg, fsdp2_peak

    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "hf", "llama-3-8b.json")) as f:
        raw = json.load(f)
    raw.pop("model_type", None)
    raw.pop("architectures", None)
    cfg = LlamaConfig(**raw)
    cfg._attn_implementation = "sdpa"
    with fake_pg(8):
        peak = fsdp2_peak(lambda: LlamaForCausalLM(cfg), 8, FAKE_SEQ,
                          mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                         reduce_dtype=torch.float32))
    with open(os.path.join(out_dir, "fake.json"), "w") as f:
        json.dump(peak, f)


FAKE_SEQ = 2048


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_fsdp_fake_pg_llama3_8b_peak_within_3_percent(tmp_path):
    """Per-rank peak of llama-3-8b, FSDP2 over 8 ranks, seq 2048, 2 micro-batches of 1: the
    planner's per-GPU tensors (its total less the framework terms, which the tracker cannot
    see) within 3% of FSDPMemTracker's peak. Model states and activations are checked by
    category: exact for the states (bf16-mixed's 2 + 2 + 12 bytes per parameter equal FSDP2's
    fp32 shards, fp32 gradients and AdamW's two fp32 moments, 16 bytes), within 0.01% for the
    activations."""
    pytest.importorskip("torch.distributed._tools.fsdp2_mem_tracker")
    forked(_fake_rank, (str(tmp_path),), nprocs=1)
    peak = json.loads((tmp_path / "fake.json").read_text())

    import txcalc
    from txcalc.engine.hardware import get_gpu
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    from txcalc.parallel.layout import Layout
    s = TrainSetting(txcalc.load("llama-3-8b"), get_gpu("h100"), seq=FAKE_SEQ, global_batch=16,
                     attn_impl="flash")
    r = {k: int(v[0]) for k, v in evaluate_layouts(s, [Layout(dp=8, zero=3)]).items()
         if k.endswith("_bytes")}
    states = r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"]
    assert states == peak["Sharded Param"] + peak["Sharded Grad"] + peak["OptState"]
    assert r["activations_bytes"] == pytest.approx(peak["Activation"], rel=1e-4)
    predicted = r["total_bytes"] - r["framework_bytes"]
    assert predicted == pytest.approx(peak["Total"], rel=0.03)
