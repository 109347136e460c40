"""fp8 training under FSDP2, per GPU: torchao's float8 training (Float8Linear, dynamic
tensorwise scaling, fp8 all-gather) on a fake process group of 8 under FakeTensorMode, against
the planner's ZeRO-3 layout of ``--precision fp8-mixed``.

torchao float8 runs on CPU and meta here (torchao 0.18, torch 2.13 CPU); where torchao is not
installed the test is skipped and the fp8 FSDP2 bytes are unverified.

Measured (FSDPMemTracker's peak of rank 0, a second micro-batch accumulating then the AdamW
step; 2 blocks of Llama 3 8B, seq 2048): sharded parameters, sharded gradients and optimizer
states equal the planner's weights + gradients + optimizer to the byte: torchao keeps fp32
shards, fp32 gradients and two fp32 moments (16 B per parameter, bf16-mixed's 2 + 2 + 12), and
its fp8 weight casts live only inside the gathered layer, which is how the planner books fp8
under ZeRO-3 (no whole-model fp8 copies). What differs from the planner's fp8-mixed recipe
(TransformerEngine's) and is left out of the check: torchao's tensorwise recipe keeps the
Linear inputs in bf16 for backward (measured activations equal bf16's), and its fp8
all-gather halves FSDP2's all-gather buffer (measured 436 -> 218 MB), which the planner's
ZeRO-3 buffers (bf16) do not model.
"""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("transformers")
#: torchao is imported by the test (and its spawned rank), not at collection: its import
#: (torch._dynamo with it) costs every xdist worker about 2 CPU seconds
TORCHAO_MISSING = ("torchao is not installed: fp8 FSDP2 per-GPU bytes are unverified (pip "
                   "install torchao; its float8 runs on CPU)")

LAYERS, SEQ, WORLD = 2, 2048, 8


def _raw() -> dict:
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "hf", "llama-3-8b.json")) as f:
        raw = json.load(f)
    return raw | {"num_hidden_layers": LAYERS}


def _fake_rank(_: int, out_dir: str) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..fsdp_fake import fake_pg, fsdp2_peak

    raw = _raw()
    raw.pop("model_type", None)
    raw.pop("architectures", None)
    cfg = LlamaConfig(**raw)
    cfg._attn_implementation = "sdpa"

    def make_model():
        model = LlamaForCausalLM(cfg)
        # the block Linears in fp8, lm_head in bf16 (the planner's fp8 ops)
        convert_to_float8_training(
            model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),
            module_filter_fn=lambda mod, name: name != "lm_head")
        return model

    with fake_pg(WORLD):
        peak = fsdp2_peak(make_model, WORLD, SEQ,
                          mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                         reduce_dtype=torch.float32))
    with open(os.path.join(out_dir, "fp8.json"), "w") as f:
        json.dump(peak, f)


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_torchao_float8_fsdp2_states_per_gpu(tmp_path):
    import importlib.util

    from .test_distributed import forked  # a forked rank: no second import of torch
    if importlib.util.find_spec("torchao") is None:
        pytest.skip(TORCHAO_MISSING)
    pytest.importorskip("torch.distributed._tools.fsdp2_mem_tracker")
    forked(_fake_rank, (str(tmp_path),), nprocs=1)
    peak = json.loads((tmp_path / "fp8.json").read_text())

    from txcalc.engine.hardware import get_gpu
    from txcalc.model.hf import from_hf_dict
    from txcalc.train.setting import TrainSetting
    from txcalc.train.evaluate import evaluate_layouts
    from txcalc.parallel.layout import Layout
    cfg = from_hf_dict(_raw(), "llama-3-8b-2-layers")
    s = TrainSetting(cfg, get_gpu("h100"), seq=SEQ, global_batch=2 * WORLD,
                     precision="fp8-mixed", attn_impl="flash")
    r = {k: int(v[0]) for k, v in evaluate_layouts(s, [Layout(dp=WORLD, zero=3)]).items()
         if k.endswith("_bytes")}
    assert r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"] == \
        peak["Sharded Param"] + peak["Sharded Grad"] + peak["OptState"]
    bf16 = TrainSetting(cfg, get_gpu("h100"), seq=SEQ, global_batch=2 * WORLD,
                        attn_impl="flash")
    act = int(evaluate_layouts(bf16, [Layout(dp=WORLD, zero=3)])["activations_bytes"][0])
    assert act == pytest.approx(peak["Activation"], rel=1e-4)  # torchao keeps bf16 inputs
