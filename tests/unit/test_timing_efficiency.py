"""Efficiencies that depend on the GPU and the shape (txcalc.engine.timing): per-GPU defaults from the
fit, a GEMM's efficiency falling with its smallest local dimension (TP shrinks it), fused
attention by sequence length and head dimension, and profiles that round-trip."""

from __future__ import annotations

import json

import pytest

from txcalc import load
from txcalc.engine import timing
from txcalc.engine.components import model_ops_tuple
from txcalc.engine.hardware import get_gpu
from txcalc.engine.timing import DeviceProfile, ProfileError, op_efficiency
from txcalc.engine.workload import Workload


def test_each_gpu_has_its_own_efficiencies():
    a100, h100 = (DeviceProfile.from_gpu(get_gpu(g)) for g in ("a100", "h100"))
    assert a100.flop_efficiency == timing.GPU_EFFICIENCY["a100-80gb"]
    assert h100.flop_efficiency == timing.GPU_EFFICIENCY["h100-sxm"]
    assert a100.flop_efficiency != h100.flop_efficiency
    # same tensor cores: the aliases' values; no published runs: the defaults
    assert DeviceProfile.from_gpu(get_gpu("h200")).flop_efficiency == h100.flop_efficiency
    assert DeviceProfile.from_gpu(get_gpu("a100-40gb")).flop_efficiency == \
        a100.flop_efficiency
    assert DeviceProfile.from_gpu(get_gpu("l4")).flop_efficiency == \
        timing.DEFAULT_FLOP_EFFICIENCY
    assert "fitted to published runs" in a100.source


def _op(cfg, component: str):
    return next(op for op in model_ops_tuple(cfg) if op.layer == 0 and
                op.component == component)


def test_tensor_parallelism_shrinks_the_gemm_and_its_efficiency():
    cfg = load("llama-3-8b")
    prof = DeviceProfile.from_gpu(get_gpu("h100")).replace(matmul_half_dim=256.0)
    w = Workload(batch=1, seq=4096, attn_impl="flash")
    base = prof.flop_efficiency["matmul"]
    for comp in ("mlp.up_proj", "mlp.down_proj", "attn.k_proj"):
        op = _op(cfg, comp)
        effs = [op_efficiency(op, w, prof, tp) for tp in (1, 2, 8)]
        assert base > effs[0] >= effs[1] > effs[2], comp  # smallest of rows, in, out/tp
    # k_proj of GQA (8 x 128 = 1024 wide) at TP 8 is 128 wide: d / (d + 256) = 1/3
    assert op_efficiency(_op(cfg, "attn.k_proj"), w, prof, 8) == pytest.approx(base / 3)
    # no shape dependence when matmul_half_dim is 0 (a profile fitted without shapes)
    flat = prof.replace(matmul_half_dim=0.0)
    assert op_efficiency(_op(cfg, "mlp.up_proj"), w, flat, 8) == base


def test_few_tokens_per_expert_slow_the_expert_gemm():
    cfg = load("mixtral-8x7b")
    prof = DeviceProfile.from_gpu(get_gpu("h100")).replace(matmul_half_dim=256.0)
    op = next(o for o in model_ops_tuple(cfg) if o.instances > 1 and o.layer == 0)
    small = op_efficiency(op, Workload(batch=1, seq=256, attn_impl="flash"), prof)
    large = op_efficiency(op, Workload(batch=8, seq=4096, attn_impl="flash"), prof)
    assert small < large  # 256 x 2 / 8 = 64 tokens per expert against 8,192


def test_fused_attention_by_sequence_length_and_head_dimension():
    f = timing.flash_shape_factor
    seqs = [256, 512, 1024, 2048, 4096, 8192, 65536]
    vals = [f(s, 128) for s in seqs]
    assert vals == sorted(vals) and vals[0] == vals[1] and vals[-1] == vals[-2] == 1.0
    assert f(64, 64) < f(64, 128) and f(16384, 256) < f(16384, 128)
    mid = f(int(2 ** 9.5), 128)  # between the 512 and 1024 points
    assert f(512, 128) < mid < f(1024, 128)
    cfg = load("llama-3-8b")
    prof = DeviceProfile.from_gpu(get_gpu("h100"))
    op = _op(cfg, "attn.core") if any(o.component == "attn.core" for o in
                                     model_ops_tuple(cfg)) else next(
        o for o in model_ops_tuple(cfg) if o.kind == "attn_scores")
    short = op_efficiency(op, Workload(batch=1, seq=512, attn_impl="flash"), prof)
    long = op_efficiency(op, Workload(batch=1, seq=8192, attn_impl="flash"), prof)
    assert long == pytest.approx(prof.flop_efficiency["attention"])
    assert short == pytest.approx(long * f(512, 128))


def test_profiles_round_trip_and_old_profiles_keep_no_shape(tmp_path):
    prof = DeviceProfile.from_gpu(get_gpu("a100")).replace(matmul_half_dim=128.0)
    prof.save(tmp_path / "p.json")
    back = DeviceProfile.load(tmp_path / "p.json")
    assert back.matmul_half_dim == 128.0 and back.attention_shape is True
    d = json.loads((tmp_path / "p.json").read_text())
    del d["matmul_half_dim"], d["attention_shape"]
    (tmp_path / "old.json").write_text(json.dumps(d))
    old = DeviceProfile.load(tmp_path / "old.json")  # fitted before shapes mattered
    assert old.matmul_half_dim == 0.0 and old.attention_shape is False
    d["matmul_half_dim"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ProfileError, match="matmul_half_dim"):
        DeviceProfile.load(tmp_path / "bad.json")
