"""Encoders of issue 13 against Hugging Face: every head, drawn configs, meta device.

For each encoder model_type a hypothesis strategy (strategies/encoders.py) draws a tiny config.json
and a head (base model, masked LM, sequence or token classification). txcalc's parameter count must
equal the numel of the HF class a user would load for that head (``AutoModel``,
``AutoModelForMaskedLM``, ``AutoModelForSequenceClassification``,
``AutoModelForTokenClassification``) built on the meta device, and the FLOPs of one training step
(forward, loss, backward) must equal torch's FlopCounterMode on that model.
"""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txcalc
from txcalc.engine.accounting import count_flops
from txcalc.errors import ConfigError
from txcalc.model.hf import from_hf_dict
from txcalc.engine.workload import Workload

from ..hf_models import dropout_saved_bytes, numel, saved_by_block, step_flops
from ..hf_record import hf_answers  # noqa: F401 (a fixture)
from .strategies.encoders import STRATEGIES, electra, longformer, modernbert, nomic_bert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

EXAMPLES = int(os.environ.get("TXCALC_HF_EXAMPLES", "15"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    derandomize="TXCALC_HF_EXAMPLES" not in os.environ,
                    suppress_health_check=list(HealthCheck))
CLASSES = {"none": "AutoModel", "mlm": "AutoModelForMaskedLM",
           "seq_cls": "AutoModelForSequenceClassification",
           "token_cls": "AutoModelForTokenClassification",
           "discriminator": "ElectraForPreTraining"}
HEADS = st.sampled_from(sorted(set(CLASSES) - {"discriminator"}))


#: HF cannot run these on meta (``.item()``): their FLOPs are measured on tiny CPU tensors
ON_CPU = {"deberta-v2"}
#: no reference-model build yet (params and FLOPs are checked against HF here)
NO_REFERENCE: set[str] = set()


def hf_model(raw: dict, head: str, device: str = "meta"):
    raw = dict(raw)
    model_type = raw.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(model_type, **raw)
        cfg._attn_implementation = "eager"
        with torch.device(device):
            cls = getattr(transformers, CLASSES[head])
            return cls.from_config(cfg) if cls.__name__.startswith("Auto") else cls(cfg)


def train_step_flops(raw: dict, head: str, batch: int, seq: int) -> int:
    device = "cpu" if raw["model_type"] in ON_CPU else "meta"
    model = hf_model(raw, head, device)
    ids = torch.zeros(batch, seq, dtype=torch.long, device=device)

    def loss():
        if head == "none":
            out = model(input_ids=ids)
            loss = out.last_hidden_state.float().sum()
            if getattr(out, "pooler_output", None) is not None:
                loss = loss + out.pooler_output.float().sum()
            return loss
        labels = torch.zeros(batch, dtype=torch.long, device=device) \
            if head == "seq_cls" else ids.float() if head == "discriminator" else ids
        return model(input_ids=ids, labels=labels).loss
    return step_flops(loss)


def hf_numel(hf_answers, raw: dict, head: str) -> int:
    """numel of the HF class of ``head``, through the recording (tests/hf_record.py)."""
    return hf_answers(raw, "encoders.numel", lambda: numel(hf_model(raw, head)), head=head)


def hf_flops(hf_answers, raw: dict, head: str, batch: int, seq: int) -> int:
    """train_step_flops through the recording (tests/hf_record.py)."""
    return hf_answers(raw, "encoders.train_step_flops",
                      lambda: train_step_flops(raw, head, batch, seq),
                      head=head, batch=batch, seq=seq)


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@SETTINGS
@given(data=st.data())
def test_params_equal_the_hf_class_of_each_head(model_type, data, hf_answers):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    head = data.draw(HEADS, label="head")
    raw["num_labels"] = data.draw(st.integers(1, 5), label="num_labels")
    assert txcalc.params(from_hf_dict(raw, head=head)).total == hf_numel(hf_answers, raw, head)


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(STRATEGIES))
@settings(max_examples=max(3, EXAMPLES // 3), deadline=None, suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_training_step_flops_equal_flopcountermode(model_type, data, hf_answers):
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    head = data.draw(HEADS, label="head")
    raw["num_labels"] = data.draw(st.integers(1, 5), label="num_labels")
    cfg = from_hf_dict(raw, head=head)
    batch, seq = data.draw(st.integers(1, 2), label="batch"), data.draw(st.integers(2, 24),
                                                                          label="seq")
    f = count_flops(cfg, Workload(batch=batch, seq=seq))
    assert f.forward + f.backward == hf_flops(hf_answers, raw, head, batch, seq)


def test_albert_shares_one_block_params_once_flops_every_layer():
    """ALBERT: 12 layers on one group hold one block's parameters, but run 12 blocks."""
    raw = {"model_type": "albert", "hidden_size": 32, "num_attention_heads": 2,
           "num_hidden_layers": 12, "intermediate_size": 64, "vocab_size": 100,
           "embedding_size": 16}
    one = from_hf_dict(dict(raw, num_hidden_layers=1))
    twelve = from_hf_dict(raw)
    assert txcalc.params(twelve).total == txcalc.params(one).total
    w = Workload(batch=1, seq=8)
    fwd = {n: count_flops(from_hf_dict(dict(raw, num_hidden_layers=n)), w).forward
           for n in (1, 2, 12)}
    assert fwd[12] - fwd[1] == 11 * (fwd[2] - fwd[1]) > 0
    assert txcalc.params(twelve).total == numel(hf_model(raw, "none"))


@pytest.mark.live
@SETTINGS
@given(raw=electra(), batch=st.integers(1, 2), seq=st.integers(2, 16))
def test_electra_discriminator_head(raw, batch, seq, hf_answers):
    """ELECTRA's replaced-token detector (ElectraForPreTraining, ``--head discriminator``):
    params == HF on meta, a training step's FLOPs (BCE on one logit per token) ==
    FlopCounterMode, the reference model's saved bytes per layer exact; the generator is the
    masked-LM head (ElectraForMaskedLM), drawn with the other heads above."""
    cfg = from_hf_dict(raw, head="discriminator")
    assert txcalc.params(cfg).total == hf_numel(hf_answers, raw, "discriminator")
    f = count_flops(cfg, Workload(batch=batch, seq=seq))
    assert f.forward + f.backward == hf_flops(hf_answers, raw, "discriminator", batch, seq)
    assert from_hf_dict(dict(raw, architectures=["ElectraForPreTraining"]), head="auto") == cfg
    reference_matches(cfg, batch, min(seq, 8), recomputes=("none",))
    with pytest.raises(ConfigError, match="discriminator"):
        from_hf_dict(dict(raw, model_type="bert"), head="discriminator")


def test_head_auto_reads_architectures():
    raw = {"model_type": "xlm-roberta", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 1, "vocab_size": 50, "intermediate_size": 8,
           "architectures": ["XLMRobertaForMaskedLM"]}
    assert from_hf_dict(raw, head="auto").head == "mlm"
    assert from_hf_dict(raw).head == "none"
    with pytest.raises(ConfigError, match="architectures"):
        from_hf_dict(dict(raw, architectures=["XLMRobertaForCausalLM"]), head="auto")
    with pytest.raises(ConfigError, match="head"):
        from_hf_dict(dict(raw, model_type="t5"), head="mlm")


# Published sizes of the encoder presets (base models, as AutoModel builds them), each with its
# source; the tolerance covers the rounding of the published figure.
PUBLISHED = [
    # Conneau et al. 2019, arXiv:1911.02116, Table 7: XLM-R (large) 550M parameters (the
    # 250k-token table dominates; HF's model card rounds the same model to 560M)
    ("xlm-roberta-large", 550e6, 0.02),
    # BAAI/bge-m3 model card: 568M parameters (XLM-R large with 8,194 positions)
    ("bge-m3", 568e6, 0.001),
    # Song et al. 2020, arXiv:2004.09297, section 4.1: MPNet base, 110M parameters
    ("all-mpnet-base-v2", 110e6, 0.005),
    # microsoft/deberta-v3-large model card: 304M backbone + 131M embedding = 435M
    ("deberta-v3-large", 435e6, 0.003),
    # Warner et al. 2024, arXiv:2412.13663, Table 3: ModernBERT-large 395M parameters
    ("modernbert-large", 395e6, 0.001),
]


@pytest.mark.parametrize("name,figure,tol", PUBLISHED)
def test_published_encoder_sizes(name, figure, tol):
    assert abs(txcalc.params(name).total - figure) / figure <= tol


# --- the reference model builds each new structure (reference/model.py) -----------------------
def reference_matches(cfg, batch: int, seq: int, src: int = 0, recomputes=("none", "selective",
                                                                          "full")) -> None:
    """Parameters (numel), executed FLOPs (FlopCounterMode) and bytes saved for backward per
    layer (saved_tensors_hooks, unique storages; bf16 on meta) of the reference model built
    from ``cfg`` equal the engine's, under each recompute mode."""
    import dataclasses

    from reference.measure import (by_layer, flops_and_saved_by_module, make_inputs,
                                   saved_by_module)
    from reference.model import build
    from txcalc.engine.accounting import count_params
    from txcalc.engine.memory import TrainingMemory

    work = Workload(batch=batch, seq=seq, src_seq=src)
    model = build(cfg, torch.bfloat16, "meta")
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
    # the FLOPs' forward also measures the bytes saved without recompute (the same build)
    _, fwd, bwd, saved = flops_and_saved_by_module(model, make_inputs(model, batch, seq, src))
    f = count_flops(cfg, work)
    assert (fwd, bwd) == (f.forward, f.backward)
    for recompute in recomputes:
        w = dataclasses.replace(work, recompute=recompute)
        if recompute == "none":
            measured = saved
        else:
            m = build(cfg, torch.bfloat16, "meta", recompute=recompute)
            measured, _ = saved_by_module(m, make_inputs(m, batch, seq, src))
        predicted = TrainingMemory(cfg, w, "bf16-mixed").activations_by_layer()
        # a stack whose outside-block ops save nothing (Marian) has no measured row
        assert {k: v for k, v in predicted.items() if v} == by_layer(measured), recompute


@pytest.mark.parametrize("model_type", sorted(STRATEGIES) + ["longformer"])
@settings(max_examples=max(2, EXAMPLES // 5), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_reference_model_saved_bytes_per_layer_exact(model_type, data):
    if model_type in NO_REFERENCE:
        pytest.skip("reference/model.py does not build DeBERTa's disentangled attention yet")
    if model_type == "longformer":  # no sequence classifier; seq a multiple of the window
        raw = data.draw(longformer(), label="config.json")
        head = data.draw(st.sampled_from(["none", "mlm", "token_cls"]), label="head")
        seq = raw["attention_window"] * data.draw(st.integers(1, 2), label="chunks")
    else:
        raw = data.draw(STRATEGIES[model_type], label="config.json")
        head = data.draw(HEADS, label="head")
        seq = data.draw(st.integers(2, 12), label="seq")
    raw["num_labels"] = data.draw(st.integers(1, 5), label="num_labels")
    cfg = from_hf_dict(raw, head=head)
    reference_matches(cfg, data.draw(st.integers(1, 2), label="batch"), seq)


@pytest.mark.parametrize("types", [[], ["c2p"], ["p2c"], ["c2p", "p2c"]])
@pytest.mark.parametrize("share", [True, False])
def test_deberta_disentangled_terms(types, share):
    """Every combination of DeBERTa's terms and share_att_key, bucketed (v3) and norm_rel_ebd:
    FLOPs equal HF on CPU (with share_att_key HF projects both position tensors even when one
    term is off: that projection runs forward only), and the reference model's params, FLOPs
    and saved bytes per layer equal the engine's under each recompute mode."""
    raw = {"model_type": "deberta-v2", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 50, "intermediate_size": 20,
           "relative_attention": True, "position_buckets": 4, "max_relative_positions": 12,
           "norm_rel_ebd": "layer_norm", "share_att_key": share, "pos_att_type": types}
    cfg = from_hf_dict(raw, head="mlm")
    assert cfg.rel_span == 4 and cfg.rel_max_position == 12
    f = count_flops(cfg, Workload(batch=2, seq=6))
    assert f.forward + f.backward == train_step_flops(raw, "mlm", 2, 6)
    reference_matches(cfg, 2, 6)


@pytest.mark.parametrize("extra", [
    {"pos_att_type": ["c2p", "p2c"]},
    {"pos_att_type": ["c2p"], "share_att_key": True, "norm_rel_ebd": "layer_norm"},
    {"pos_att_type": ["p2c"], "attention_probs_dropout_prob": 0.0, "position_buckets": 4,
     "norm_rel_ebd": "layer_norm"},
    {"relative_attention": False}])
def test_deberta_dropout_masks_equal_hf(extra):
    """DeBERTa drops BERT's three places and, in every block, its relative embeddings
    (``pos_dropout``): a dropout-on step saves beyond an eval step what the engine says (HF on
    CPU in bf16: masks in bf16, ``dropout_mask="act"``); the reference model agrees per layer
    under each recompute mode."""
    from reference.measure import by_layer, make_inputs, saved_by_module
    from reference.model import build
    from txcalc.engine.memory import TrainingMemory
    raw = {"model_type": "deberta-v2", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 50, "intermediate_size": 20,
           "relative_attention": True, "max_relative_positions": 4,
           "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, **extra}
    cfg = from_hf_dict(raw)
    model = hf_model(raw, "none", "cpu").to(torch.bfloat16)
    ids = torch.ones(1, 6, dtype=torch.long)

    dropped = dropout_saved_bytes(model, lambda: model(input_ids=ids))

    def work(dropout: bool, recompute: str = "none", fp32: bool = False) -> Workload:
        return Workload(batch=1, seq=6, attn_impl="eager", dropout=dropout, dropout_mask="act",
                        softmax_fp32=fp32, recompute=recompute)
    act = lambda w: TrainingMemory(cfg, w, "bf16-mixed").to_json()["activations_bytes"]  # noqa
    assert act(work(True)) - act(work(False)) == dropped
    for recompute in ("none", "selective", "full"):
        ref = build(cfg, torch.bfloat16, "meta", recompute=recompute, dropout=True)
        got, _ = saved_by_module(ref, make_inputs(ref, 1, 6))
        assert TrainingMemory(cfg, work(True, recompute, True), "bf16-mixed") \
            .activations_by_layer() == by_layer(got), recompute


def test_deberta_v3_large_reference_matches_the_engine():
    """The deberta-v3-large preset (24 layers, 256 buckets, c2p and p2c) built on meta."""
    reference_matches(txcalc.load("deberta-v3-large"), 1, 16, recomputes=("none", "full"))


#: dropout fields of the types whose dropout sits off BERT's three places, and whether HF's
#: eager softmax upcasts to fp32
DROPOUT_KEYS = {"distilbert": (("dropout", "attention_dropout"), False),
                "albert": (("hidden_dropout_prob", "attention_probs_dropout_prob"), False),
                "esm": (("hidden_dropout_prob", "attention_probs_dropout_prob"), False),
                "modernbert": (("embedding_dropout", "attention_dropout", "mlp_dropout"), True)}


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(DROPOUT_KEYS))
@settings(max_examples=max(3, EXAMPLES // 3), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_dropout_masks_equal_hf(model_type, data, hf_answers):
    """DistilBERT (embeddings, probabilities, after the MLP only), ALBERT (BERT's places less
    the MLP output's), ESM (less the embeddings'), ModernBERT (embeddings, probabilities, after
    Wo, on the gated product): the bytes a training step saves beyond the same step in eval
    mode equal the engine's masks (bf16 on meta, ``dropout_mask="act"``), each field drawn on
    or off."""
    from txcalc.engine.memory import TrainingMemory
    keys, fp32 = DROPOUT_KEYS[model_type]
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    for key in keys:
        raw[key] = data.draw(st.sampled_from([0.0, 0.1]), label=key)
    seq = data.draw(st.integers(2, 10), label="seq")
    cfg = from_hf_dict(raw)

    def measure() -> int:
        model = hf_model(raw, "none").to(torch.bfloat16)
        ids = torch.ones(1, seq, dtype=torch.long, device="meta")
        return dropout_saved_bytes(model, lambda: model(input_ids=ids))
    dropped = hf_answers(raw, "encoders.dropout_saved_bytes", measure, seq=seq)

    def act(dropout: bool) -> int:
        w = Workload(batch=1, seq=seq, attn_impl="eager", dropout=dropout, dropout_mask="act",
                     softmax_fp32=fp32)
        return TrainingMemory(cfg, w, "bf16-mixed").to_json()["activations_bytes"]
    assert act(True) - act(False) == dropped


@pytest.mark.parametrize("model_type", sorted(DROPOUT_KEYS))
@settings(max_examples=max(3, EXAMPLES // 3), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(data=st.data())
def test_reference_dropout_places_equal_the_engine(model_type, data):
    """The reference model drops where these types do (``resid_dropout_at``): saved bytes per
    layer of a dropout-on step equal the engine's under each recompute mode."""
    from reference.measure import by_layer, make_inputs, saved_by_module
    from reference.model import build
    from txcalc.engine.memory import TrainingMemory
    raw = data.draw(STRATEGIES[model_type], label="config.json")
    for key in DROPOUT_KEYS[model_type][0]:
        raw[key] = 0.1
    cfg = from_hf_dict(raw)
    seq = data.draw(st.integers(2, 10), label="seq")
    for recompute in ("none", "selective", "full"):
        model = build(cfg, torch.bfloat16, "meta", recompute=recompute, dropout=True)
        measured, _ = saved_by_module(model, make_inputs(model, 1, seq))
        work = Workload(batch=1, seq=seq, recompute=recompute, dropout=True, dropout_mask="act")
        assert TrainingMemory(cfg, work, "bf16-mixed").activations_by_layer() == \
            by_layer(measured), recompute


@settings(max_examples=max(3, EXAMPLES // 3), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(raw=longformer(), head=st.sampled_from(["none", "mlm", "token_cls"]),
       batch=st.integers(1, 2), chunks=st.integers(1, 3), labels=st.integers(1, 5))
def test_longformer_params_and_flops_equal_hf(raw, head, batch, chunks, labels):
    """Longformer (no token with global attention, the default of these heads): params ==
    the HF class on meta (global q/k/v projections included); a training step's executed
    FLOPs == FlopCounterMode on CPU (HF's overlapping chunks, seq a multiple of
    attention_window); model FLOPs count the attended pairs, the probabilities HF's local
    attention leaves above zero (``output_attentions``)."""
    raw["num_labels"] = labels
    cfg = from_hf_dict(raw, head=head)
    assert txcalc.params(cfg).total == numel(hf_model(raw, head))
    seq = chunks * raw["attention_window"]
    f = count_flops(cfg, Workload(batch=batch, seq=seq))
    ON_CPU.add("longformer")
    try:
        assert f.forward + f.backward == train_step_flops(raw, head, batch, seq)
    finally:
        ON_CPU.discard("longformer")
    model = hf_model(raw, "none", "cpu").eval()  # no dropout on the probabilities
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probs = model(input_ids=torch.ones(1, seq, dtype=torch.long) * 5,
                      output_attentions=True).attentions
    from txcalc.engine.ops import sliding_chunk_pairs
    w, h, hd = raw["attention_window"] // 2, cfg.n_heads, cfg.head_dim
    attended = sum(int((p[0, 0] > 0).sum()) for p in probs)
    executed = cfg.n_layers * sum(sliding_chunk_pairs(k, seq, w)
                                  for k in ("attn_scores", "attn_context"))
    # forward + 2x backward of the scores and the context, per sequence and head
    assert f.forward + f.backward - f.model == 3 * 2 * batch * h * hd * (executed - 2 * attended)


#: HF LongformerModel's module paths -> the reference model's (the block's; outside it, whole)
_LONGFORMER_BLOCK = {"attention.self.query": "attn.q_proj", "attention.self.key": "attn.k_proj",
                     "attention.self.value": "attn.v_proj",
                     "attention.self.query_global": "attn.q_global",
                     "attention.self.key_global": "attn.k_global",
                     "attention.self.value_global": "attn.v_global",
                     "attention.output.dense": "attn.o_proj",
                     "attention.output.LayerNorm": "attn_norm",
                     "intermediate.dense": "mlp.up_proj", "output.dense": "mlp.down_proj",
                     "output.LayerNorm": "mlp_norm"}
_LONGFORMER_TOP = {"embeddings.word_embeddings": "embed.tokens",
                   "embeddings.token_type_embeddings": "embed.token_types",
                   "embeddings.position_embeddings": "embed.positions",
                   "embeddings.LayerNorm": "embed.norm", "pooler.dense": "pooler"}


def _copy_longformer_weights(hf, ref) -> None:
    """HF's weights into the reference model (module paths above). RoBERTa's positions start
    at padding_idx + 1 = 2 (no padding in the ids), the reference's at 0: rows shift by 2."""
    hf_params = dict(hf.named_parameters())
    with torch.no_grad():
        for name, p in ref.named_parameters():
            mod, _, leaf = name.rpartition(".")
            if mod.startswith("layers."):
                _, i, rest = mod.split(".", 2)
                inv = {v: k for k, v in _LONGFORMER_BLOCK.items()}
                src = f"encoder.layer.{i}.{inv[rest]}"
            else:
                src = {v: k for k, v in _LONGFORMER_TOP.items()}[mod]
            p.copy_(hf_params[f"{src}.{leaf}"])
        ref.embed.positions.weight[:-2].copy_(
            hf_params["embeddings.position_embeddings.weight"][2:])


@settings(max_examples=max(3, EXAMPLES // 3), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(raw=longformer(), batch=st.integers(1, 2), chunks=st.integers(1, 3),
       layers=st.integers(1, 2))
def test_longformer_reference_equals_hf_and_the_engine(raw, batch, chunks, layers):
    """Longformer's chunked local attention (reference/model.py ``SlidingChunkCore``):

    - the reference model with HF's weights gives HF LongformerModel's last hidden state
      (fp32, CPU, no token with global attention);
    - bytes saved for backward per layer (saved_tensors_hooks, unique storages) equal the
      engine's in fp32 and bf16 under none, selective and full recompute (meta device);
    - HF LongformerModel on CPU saves per block what the engine says (no recompute), plus,
      with more than one sequence, one copy of the block input per key and value Linear
      (HF runs them on the (S, B, D) transpose, which each Linear copies when B > 1), less in
      bf16 what CPU LayerNorm keeps in bf16 instead of fp32."""
    import dataclasses

    from reference.measure import by_layer, make_inputs, saved_by_module
    from reference.model import build
    from txcalc.engine.memory import TrainingMemory
    raw = dict(raw, num_hidden_layers=layers, layer_norm_eps=1e-5, hidden_dropout_prob=0.0,
               attention_probs_dropout_prob=0.0)
    cfg = from_hf_dict(raw)
    seq = chunks * raw["attention_window"]
    hf = hf_model(raw, "none", "cpu").eval()
    ref = build(cfg, torch.float32, "cpu").eval()
    _copy_longformer_weights(hf, ref)
    ids = torch.randint(2, raw["vocab_size"], (batch, seq))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(ref.hidden(ids), hf(input_ids=ids).last_hidden_state)

    work = Workload(batch=batch, seq=seq)
    for dtype, precision in ((torch.float32, "fp32"), (torch.bfloat16, "bf16-mixed")):
        for recompute in ("none", "selective", "full"):
            model = build(cfg, dtype, "meta", recompute=recompute)
            measured, _ = saved_by_module(model, make_inputs(model, batch, seq))
            w = dataclasses.replace(work, recompute=recompute)
            assert TrainingMemory(cfg, w, precision).activations_by_layer() == \
                by_layer(measured), (precision, recompute)
        engine = TrainingMemory(cfg, work, precision).activations_by_layer()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = saved_by_block(hf.to(dtype), input_ids=ids)
        size = torch.finfo(dtype).bits // 8
        copies = 2 * batch * seq * cfg.d_model * size if batch > 1 else 0
        # torch's CPU layer_norm keeps the mean and 1/std in bf16 for a bf16 input (CUDA's and
        # meta's in fp32, what the engine says): two norms a block, two statistics per token
        stats = 2 * 2 * batch * seq * (4 - size)
        assert got == {i: engine[("", i)] + copies - stats for i in range(layers)}, precision


@pytest.mark.parametrize("batch,seq,heads", [(1, 8, 2), (2, 12, 1), (1, 4, 1)])
def test_longformer_dropout_masks_equal_hf_and_the_reference(batch, seq, heads):
    """Longformer drops at BERT's three places (hidden_dropout_prob, attention_probs_dropout_prob,
    HF's defaults 0.1): the bytes a training step saves beyond the same step in eval mode
    equal the engine's masks (HF on CPU, fp32: masks in fp32, ``dropout_mask="act"``); the
    reference model with dropout agrees per layer under each recompute mode (bf16 on meta)."""
    from reference.measure import by_layer, make_inputs, saved_by_module
    from reference.model import build
    from txcalc.engine.memory import TrainingMemory
    raw = {"model_type": "longformer", "hidden_size": 16, "num_attention_heads": heads,
           "num_hidden_layers": 2, "vocab_size": 30, "intermediate_size": 8,
           "attention_window": 4, "max_position_embeddings": 64}
    cfg = from_hf_dict(raw)
    assert (cfg.embed_dropout, cfg.attn_dropout, cfg.resid_dropout) == (0.1, 0.1, 0.1)
    model = hf_model(raw, "none", "cpu")
    ids = torch.randint(2, 30, (batch, seq))

    dropped = dropout_saved_bytes(model, lambda: model(input_ids=ids).last_hidden_state.sum())

    def work(dropout: bool, recompute: str = "none") -> Workload:
        return Workload(batch=batch, seq=seq, dropout=dropout, dropout_mask="act",
                        recompute=recompute)
    act = lambda w: TrainingMemory(cfg, w, "fp32").to_json()["activations_bytes"]  # noqa
    assert act(work(True)) - act(work(False)) == dropped > 0
    for recompute in ("none", "selective", "full"):
        ref = build(cfg, torch.bfloat16, "meta", recompute=recompute, dropout=True)
        got, _ = saved_by_module(ref, make_inputs(ref, batch, seq))
        assert TrainingMemory(cfg, work(True, recompute), "bf16-mixed") \
            .activations_by_layer() == by_layer(got), recompute


@pytest.mark.parametrize("recompute,layers", [("full", 1), ("selective", 2), ("full", 2)])
def test_longformer_padding_mask_under_partial_recompute(recompute, layers):
    """The (B, S) padding mask every block's masked_fill reads is kept by the first block
    whose core is not recomputed (Megatron's block method: the first ``layers`` blocks
    recompute): reference == engine per layer."""
    from reference.measure import by_layer, make_inputs, saved_by_module
    from reference.model import apply_recompute, build
    from txcalc.engine.memory import TrainingMemory
    cfg = from_hf_dict({"model_type": "longformer", "hidden_size": 16,
                        "num_attention_heads": 2, "num_hidden_layers": 3, "vocab_size": 30,
                        "intermediate_size": 8, "attention_window": 4,
                        "max_position_embeddings": 64})
    w = Workload(batch=2, seq=8, recompute=recompute, recompute_layers=layers,
                 recompute_method="block")
    model = apply_recompute(build(cfg, torch.bfloat16, "meta"), w)
    got, _ = saved_by_module(model, make_inputs(model, 2, 8))
    assert TrainingMemory(cfg, w, "bf16-mixed").activations_by_layer() == by_layer(got)


def test_longformer_refuses_what_it_does_not_model():
    raw = {"model_type": "longformer", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 50, "intermediate_size": 8}
    # the sequence classifier (global attention on the first token) is modelled now:
    # tests/conformance/test_longformer_global.py
    assert from_hf_dict(raw, head="seq_cls").head == "seq_cls"
    with pytest.raises(ConfigError, match=r"attention_window.*\[4, 8\]"):
        from_hf_dict(dict(raw, attention_window=[4, 8]))
    with pytest.raises(ConfigError, match="attention_window"):
        from_hf_dict(dict(raw, attention_window=3))
    cfg = from_hf_dict(dict(raw, attention_window=[4, 4]))
    assert cfg.sliding_window == 2
    for bad, match in ((dict(sliding_window=0), "sliding_chunks.*needs a sliding_window"),
                       (dict(global_qkv="yes"), "global_qkv"),
                       (dict(resid_dropout_at="ffn"), r"resid_dropout_at \('ffn'\)"),
                       (dict(rel_max_position=-1), "rel_max_position")):
        with pytest.raises(ConfigError, match=match):
            cfg.replace(**bad)


def test_cli_selects_the_head_of_a_config_json(tmp_path, capsys):
    """`--head` on params, flops and memory: the same counts as from_hf_dict(head=...); a bad
    head and a head on a preset exit 2 with one line."""
    import json

    from typer.testing import CliRunner

    from txcalc.cli import app
    raw = {"model_type": "electra", "hidden_size": 32, "embedding_size": 16,
           "num_attention_heads": 2, "num_hidden_layers": 2, "intermediate_size": 48,
           "vocab_size": 100, "architectures": ["ElectraForTokenClassification"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))

    def run(*argv):
        return CliRunner().invoke(app, [str(a) for a in argv])
    for head in ("none", "mlm", "seq_cls", "token_cls", "auto"):
        want = from_hf_dict(raw, head=head)
        r = run("params", path, "--head", head, "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["total_params"] == \
            txcalc.params(want).total
        r = run("flops", path, "--head", head, "--seq", 16, "--json")
        assert json.loads(r.stdout)["forward_flops"] == count_flops(
            want, Workload(batch=1, seq=16)).forward
    assert from_hf_dict(raw, head="auto").head == "token_cls"
    r = run("memory", path, "--head", "mlm", "--seq", 16, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["total_bytes"] > 0
    from txcalc.cli import main
    for argv in (["params", str(path), "--head", "lm"], ["params", "bge-m3", "--head", "mlm"]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and "head" in err
        assert "Traceback" not in err


@settings(max_examples=max(3, EXAMPLES // 3), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(raw=modernbert(), local=st.integers(2, 12), seq=st.integers(2, 20))
def test_modernbert_local_attention_model_flops(raw, local, seq):
    """ModernBERT's local layers attend within local_attention // 2 tokens either side: the
    model FLOPs skip the masked pairs, counted here from the attention probabilities HF's
    eager forward gives (tiny CPU model, output_attentions); the executed FLOPs are the dense
    kernel's (every pair: FlopCounterMode, test above)."""
    raw = dict(raw, local_attention=local)
    cfg = from_hf_dict(raw)
    model = hf_model(raw, "none", "cpu")
    with torch.no_grad():
        probs = model(input_ids=torch.zeros(1, seq, dtype=torch.long),
                      output_attentions=True).attentions
    h, hd = cfg.n_heads, cfg.head_dim
    # per layer, the skipped pairs of one head: scores and context, forward + 2x backward
    skipped = sum(seq * seq - int((p[0, 0] > 0).sum()) for p in probs)
    f = count_flops(cfg, Workload(batch=1, seq=seq))
    assert f.forward + f.backward - f.model == 3 * 2 * 2 * h * hd * skipped
    assert [cfg.window(i) for i in range(cfg.n_layers)] == [
        local // 2 if t == "sliding_attention" else 0 for t in model.config.layer_types]


@settings(max_examples=max(3, EXAMPLES // 3), deadline=None,
          suppress_health_check=list(HealthCheck),
          derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
@given(raw=nomic_bert(), hidden=st.sampled_from([0.0, 0.1]), probs=st.sampled_from([0.0, 0.1]),
       seq=st.integers(2, 10))
def test_nomic_bert_dropout_masks_equal_hf(raw, hidden, probs, seq):
    """Nomic BERT's dropout (hidden_dropout_prob on the embeddings and both sub-block outputs,
    attention_probs_dropout_prob on the probabilities): the bytes a training step saves beyond
    the same step in eval mode equal the engine's masks (bf16 on meta, ``dropout_mask="act"``;
    its eager softmax runs in the activation dtype)."""
    from txcalc.engine.memory import TrainingMemory
    raw = dict(raw, hidden_dropout_prob=hidden, attention_probs_dropout_prob=probs)
    cfg = from_hf_dict(raw)
    model = hf_model(raw, "none").to(torch.bfloat16)
    ids = torch.zeros(1, seq, dtype=torch.long, device="meta")

    dropped = dropout_saved_bytes(model, lambda: model(input_ids=ids))

    def act(dropout: bool) -> int:
        w = Workload(batch=1, seq=seq, attn_impl="eager", dropout=dropout, dropout_mask="act",
                     softmax_fp32=False)
        return TrainingMemory(cfg, w, "bf16-mixed").to_json()["activations_bytes"]
    assert act(True) - act(False) == dropped
