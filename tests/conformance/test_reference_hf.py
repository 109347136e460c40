"""Every preset with a Hugging Face class: the reference model's parameters and executed FLOPs
equal the HF model's on the meta device, in total, per layer (forward) and per component
within a layer (forward: attention, cross-attention, MLP/MoE).

FlopCounterMode attributes forward FLOPs to the module that runs them exactly; backward FLOPs
land on modules loosely (HF's self_attn collects lower layers' backward), so backward is
compared as a total. Rows that are exact: every per-layer and per-component forward row, and
the forward and backward totals. HF's numbers come from the recording of the installed
transformers version (``hf_answers``; ``-m live`` builds the HF models again).
"""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

import txcalc

from ..hf_models import ENCODERS, SEQ2SEQ, SPEECH, hf_model, numel, torch
from ..hf_record import hf_answers  # noqa: F401 (a fixture)

from reference.measure import (conv_backward_by_groups, exclusive_flops,  # noqa: E402
                               flops_by_module, make_inputs)
from reference.model import build  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "hf"
PRESETS = sorted(p.stem for p in DATA.glob("*.json"))
BATCH, SEQ, SRC = 1, 16, 24
#: HF runs every expert on every token (Llama4TextMoe): its FLOPs exceed the routed count by
#: the unrouted experts, checked under that convention in tests/conformance/test_hf_norms_chunks_sinks.py
DENSE_EXPERTS = {"llama4_text"}

_LAYER = re.compile(r"(?:(encoder|decoder)\.)?(?:\w+\.)*?(?:layers|layer|h|block)\.(\d+)(?:\.|$)")
_CROSS = ("EncDecAttention", "crossattention", "cross_attn", "encoder_attn")
_ATTN = ("attn", "attention", "SelfAttention")


def where(path: str, enc_dec: bool) -> tuple[str, int, str]:
    """(stack, layer, component) of a module path in an HF or a reference model."""
    m = _LAYER.search(path)
    if not m:
        return "", -1, "outside"
    parts = path.split(".")
    stack = ("decoder" if "decoder" in parts else "encoder") if enc_dec else ""
    comp = ("cross_attn" if any(c in path for c in _CROSS)
            else "attn" if any(c in path for c in _ATTN) and "output.dense" != path[-12:]
            else "mlp")
    if re.search(r"(?:layer|layers)\.\d+\.attention\.output", path):  # BERT attention output
        comp = "attn"
    return stack, int(m.group(2)), comp


def grouped(exclusive: dict[str, int], enc_dec: bool) -> Counter:
    out: Counter = Counter()
    for path, v in exclusive.items():
        out[where(path, enc_dec)] += v
    return out


def hf_flops(raw: dict, src_seq: int = SRC):
    from torch.utils.flop_counter import FlopCounterMode

    model = hf_model(raw)
    ids = torch.zeros(BATCH, SEQ, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as fwd:
        if raw["model_type"] in SPEECH:  # Whisper: two log-mel frames per encoder position
            mel = torch.zeros(BATCH, raw["num_mel_bins"], 2 * src_seq, device="meta")
            loss = model(input_features=mel, labels=ids).loss
        elif raw["model_type"] in ENCODERS - {"bert", "roberta"}:  # base models (issue 13)
            out = model(input_ids=ids)
            loss = out.last_hidden_state.float().sum()
            if getattr(out, "pooler_output", None) is not None:
                loss = loss + out.pooler_output.float().sum()
        elif raw["model_type"] in SEQ2SEQ:
            src = torch.zeros(BATCH, SRC, dtype=torch.long, device="meta")
            loss = model(input_ids=src, labels=ids).loss
        elif raw["model_type"] in ("bert", "roberta"):
            out = model(input_ids=ids)
            loss = out.last_hidden_state.float().sum() + out.pooler_output.float().sum()
        elif raw["model_type"] == "mllama":  # the vision states its cross layers read, given
            states = torch.zeros(BATCH, src_seq, raw["text_config"]["hidden_size"],
                                 device="meta", dtype=next(model.parameters()).dtype)
            loss = model(input_ids=ids, labels=ids, cross_attention_states=states).loss
        else:
            loss = model(input_ids=ids, labels=ids).loss
    # torch counts a depthwise conv's weight gradient C times over (Mamba's conv1d): the same
    # correction as for our reference (reference.measure.conv_backward_by_groups)
    with FlopCounterMode(display=False, custom_mapping={
            torch.ops.aten.convolution_backward: conv_backward_by_groups}) as bwd:
        loss.backward()
    return (numel(model), exclusive_flops(fwd.get_flop_counts(), type(model).__name__),
            fwd.get_total_flops(), bwd.get_total_flops())


@pytest.mark.live
@pytest.mark.parametrize("name", PRESETS)
def test_reference_params_and_flops_equal_hf_on_meta(name, hf_answers):
    raw = json.loads((DATA / f"{name}.json").read_text())
    cfg = txcalc.load(name)
    if cfg.rel_span:  # HF's DeBERTa cannot run on meta (.item()); checked on tiny CPU
        pytest.skip("DeBERTa: HF needs CPU tensors; the reference build is checked against "
                    "the engine and HF's FLOPs on tiny CPU models in tests/conformance/test_encoders.py")
    ref = build(cfg, torch.bfloat16, "meta")
    src = SRC if cfg.family == "encoder-decoder" or cfg.cross_layers else 0
    if cfg.audio_mels:  # HF's Whisper takes exactly max_source_positions encoder frames
        src = cfg.encoder_max_position
    ref_per_module, ref_fwd, ref_bwd = flops_by_module(ref, make_inputs(ref, BATCH, SEQ, src))
    # HF's side is recorded per transformers version (tests/hf_record.py): -m live rebuilds it
    hf_n, hf_per_module, hf_fwd, hf_bwd = hf_answers(raw, "reference_hf.flops",
                                                     lambda: hf_flops(raw, src), src=src)
    if raw["model_type"] in ("t5", "mt5", "umt5") and raw.get("tie_word_embeddings") is False:
        hf_n += cfg.vocab_size * cfg.d_model  # the lm_head transformers 5 drops (hf_import)
    assert sum(p.numel() for p in ref.parameters()) == hf_n
    if raw["model_type"] in DENSE_EXPERTS:
        return
    assert (ref_fwd, ref_bwd) == (hf_fwd, hf_bwd)
    enc_dec = cfg.family == "encoder-decoder"
    ref_rows, hf_rows = grouped(ref_per_module, enc_dec), grouped(hf_per_module, enc_dec)
    if raw["model_type"] == "nemotron_h":  # HF names every block's module ``mixer``: its
        # attention layers' rows cannot be told apart by path; compare per layer
        ref_rows, hf_rows = (Counter({k[:2]: 0 for k in rows}) + Counter(
            {k[:2]: sum(v for j, v in rows.items() if j[:2] == k[:2]) for k in rows})
            for rows in (ref_rows, hf_rows))
    assert ref_rows == hf_rows
    assert len([k for k in ref_rows if k[1] >= 0]) >= cfg.n_layers  # rows really are per layer
