"""Hypothesis strategy: small ModelConfigs that span every option the engine models."""

from __future__ import annotations

from hypothesis import strategies as st

from txcalc.model.checks import ACTIVATIONS
from txcalc.model.config import ModelConfig


@st.composite
def configs(draw, family=None, moe=None, mla=None):
    family = family or draw(st.sampled_from(["decoder", "decoder", "encoder", "encoder-decoder"]))
    enc_dec = family == "encoder-decoder"
    n_kv = draw(st.sampled_from([1, 2]))
    n_heads = n_kv * draw(st.sampled_from([1, 2, 3]))
    head_dim = draw(st.sampled_from([4, 6, 8]))
    d_model = draw(st.sampled_from([12, 16, 24]))
    is_mla = (not enc_dec) and (draw(st.booleans()) if mla is None else mla) and \
        draw(st.integers(0, 2)) == 0 if mla is None else (mla and not enc_dec)
    is_moe = (not enc_dec) and (draw(st.integers(0, 3)) == 0 if moe is None else moe)
    pos = draw(st.sampled_from(["learned", "sinusoidal", "rotary", "relative_bias", "alibi",
                                "none"]))
    norm_position = draw(st.sampled_from(["pre", "pre", "post", "sandwich"]))
    parallel = family == "decoder" and norm_position == "pre" and draw(st.integers(0, 3)) == 0
    n_layers = draw(st.integers(1, 3))
    kw = dict(
        name="hypo", family=family, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
        n_kv_heads=0 if is_mla else n_kv, head_dim=head_dim,
        vocab_size=draw(st.sampled_from([17, 32, 50])),
        d_ff=draw(st.sampled_from([20, 32])),
        n_encoder_layers=draw(st.integers(1, 2)) if enc_dec else 0,
        qkv_bias=draw(st.booleans()), out_bias=draw(st.booleans()),
        qk_norm="none" if is_mla else draw(st.sampled_from(["none", "none", "head", "full"])),
        parallel_block=parallel, parallel_norms=draw(st.sampled_from([1, 2])),
        activation=draw(st.sampled_from(ACTIVATIONS)), mlp_bias=draw(st.booleans()),
        norm_type=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        norm_bias=draw(st.booleans()), norm_affine=draw(st.integers(0, 4)) > 0,
        norm_position=norm_position, final_norm=draw(st.booleans()),
        embed_norm=draw(st.booleans()), pos_type=pos, max_position=64,
        position_offset=draw(st.sampled_from([0, 2])) if pos == "learned" else 0,
        relative_buckets=draw(st.sampled_from([4, 8])),
        type_vocab_size=draw(st.sampled_from([0, 0, 2])),
        embed_dim=draw(st.sampled_from([0, 0, 8])),
        head=draw(st.sampled_from(["lm", "lm", "none"])) if family == "encoder" else "lm",
        tie_embeddings=draw(st.booleans()),
        pooler=family == "encoder" and draw(st.booleans()),
    )
    kw["lm_head_bias"] = kw["head"] == "lm" and draw(st.booleans())
    if family != "encoder" and draw(st.integers(0, 2)) == 0:
        kw["sliding_window"] = draw(st.integers(1, 6))
        kw["global_every"] = draw(st.sampled_from([0, 2]))
        if not kw["global_every"] and draw(st.booleans()):  # HF layer_types: these slide
            kw["sliding_layers"] = tuple(sorted(draw(st.sets(st.integers(0, n_layers - 1)))))
    if is_mla:
        rope = draw(st.sampled_from([2, 4]))
        kw.update(kv_lora_rank=draw(st.sampled_from([4, 8])),
                  q_lora_rank=draw(st.sampled_from([0, 6])), qk_nope_head_dim=4,
                  qk_rope_head_dim=rope, v_head_dim=draw(st.sampled_from([4, 6])))
    if is_moe:
        E = draw(st.integers(2, 4))
        kw.update(n_experts=E, top_k=draw(st.integers(1, E)),
                  moe_d_ff=draw(st.sampled_from([0, 12])),
                  n_shared_experts=draw(st.sampled_from([0, 0, 1, 2])),
                  first_k_dense=draw(st.integers(0, 1)) if n_layers > 1 else 0,
                  moe_every=draw(st.sampled_from([1, 1, 2])),
                  router_bias=draw(st.booleans()))
        kw["shared_expert_gate"] = kw["n_shared_experts"] > 0 and draw(st.booleans())
    return ModelConfig(**kw)


def workloads(cfg: ModelConfig):
    """(batch, seq, src_seq) small enough for a meta or CPU run."""
    return st.tuples(st.integers(1, 2), st.integers(2, 12),
                     st.integers(2, 12) if cfg.family == "encoder-decoder" else st.just(0))


def assert_reference_equals_engine(cfg: ModelConfig, batch: int, seq: int) -> None:
    """The reference model (reference/model.py) built from ``cfg`` on meta: params and one
    training step's forward/backward FLOPs (FlopCounterMode) equal the engine's, and the saved
    bytes per layer (saved_tensors_hooks) equal ``activations_by_layer`` in fp32 and bf16-mixed,
    without and with full recompute."""
    import dataclasses

    import torch

    from reference.measure import (by_layer, flops_and_saved_by_module, make_inputs,
                                   saved_by_module)
    from reference.model import build
    from txcalc.engine.accounting import count_flops, count_params
    from txcalc.engine.memory import TrainingMemory
    from txcalc.engine.workload import Workload

    work = Workload(batch=batch, seq=seq)
    model = build(cfg, torch.bfloat16, "meta")
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
    # the FLOPs' forward also measures the bytes saved in bf16 without recompute
    _, fwd, bwd, saved_bf16 = flops_and_saved_by_module(model, make_inputs(model, batch, seq))
    f = count_flops(cfg, work)
    assert (fwd, bwd) == (f.forward, f.backward)
    for dtype, precision in ((torch.float32, "fp32"), (torch.bfloat16, "bf16-mixed")):
        for recompute in ("none", "full"):
            if (dtype, recompute) == (torch.bfloat16, "none"):
                measured = saved_bf16
            else:
                model = build(cfg, dtype, "meta", recompute=recompute)
                measured, _ = saved_by_module(model, make_inputs(model, batch, seq))
            w = dataclasses.replace(work, recompute=recompute)
            predicted = TrainingMemory(cfg, w, precision).activations_by_layer()
            assert predicted == by_layer(measured), (precision, recompute)
