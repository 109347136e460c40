"""Longformer's global attention, its padding and its kernel, against Hugging Face.

HF's ``LongformerSelfAttention`` (transformers 5.x) with g tokens of global attention per
sequence adds to the chunked local attention: every query against the g global keys (one
softmax with the band), the g global values in the output, and for the g global rows their
own q_global / key_global / value_global attention over every token (txcalc
``attention.global_attention``, ``Workload.global_tokens``; the sequence classifier gives
the first token global attention by default). ``LongformerModel._pad_to_window_size`` pads
any sequence to a multiple of attention_window and every block runs the padded length
(``Op.pad_to``). HF has only this eager attention (LongformerModel refuses sdpa and
flash_attention_2): txcalc counts it whatever ``--attn`` says (``Op.fused_attn``).

Checked here: parameters == the HF class on meta for every head (the sequence classifier
included); a training step's FLOPs == FlopCounterMode on tiny CPU tensors for drawn configs,
heads, g and sequence lengths that are not multiples of the window, under each --attn; the
reference model (HF's weights) gives HF's hidden states with global tokens and padding, and
saves per layer what the engine says (saved_tensors_hooks) under each recompute mode, in
fp32 and bf16, with and without dropout; HF itself saves per block what the engine says,
plus the stated copies of its transposed Linear inputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txcalc
from txcalc.engine.accounting import count_flops
from txcalc.errors import WorkloadError
from txcalc.model.hf import from_hf_dict
from txcalc.engine.workload import Workload

from ..hf_models import dropout_saved_bytes, numel, saved_by_block, step_flops
from .strategies.encoders import longformer
from tests.conformance.test_encoders import _copy_longformer_weights, hf_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

EXAMPLES = int(os.environ.get("TXCALC_HF_EXAMPLES", "15"))
FEW = settings(max_examples=max(3, EXAMPLES // 3), deadline=None,
               suppress_health_check=list(HealthCheck),
               derandomize="TXCALC_HF_EXAMPLES" not in os.environ)
HEADS = ["none", "mlm", "seq_cls", "token_cls"]


def _global_mask(batch: int, seq: int, g: int):
    """HF's global_attention_mask with the first g tokens global (None: none passed, HF's
    default: no global token, or the sequence classifier's first token)."""
    if not g:
        return None
    mask = torch.zeros(batch, seq, dtype=torch.long)
    mask[:, :g] = 1
    return mask


def _hf_train_step_flops(raw: dict, head: str, batch: int, seq: int, g: int) -> int:
    """FlopCounterMode over forward, loss and backward of the HF class on CPU."""
    model = hf_model(raw, head, "cpu")
    ids = torch.randint(2, raw["vocab_size"], (batch, seq))
    kw = {"global_attention_mask": _global_mask(batch, seq, g)}

    def loss():
        if head == "none":
            out = model(input_ids=ids, **kw)
            return out.last_hidden_state.float().sum() + out.pooler_output.float().sum()
        labels = torch.zeros(batch, dtype=torch.long) if head == "seq_cls" else \
            torch.zeros_like(ids) if head == "token_cls" else ids
        return model(input_ids=ids, labels=labels, **kw).loss
    return step_flops(loss)


@FEW
@given(raw=longformer(), head=st.sampled_from(HEADS), labels=st.integers(1, 5))
def test_params_equal_the_hf_class_of_each_head(raw, head, labels):
    """The sequence classifier (LongformerForSequenceClassification: no pooler, RoBERTa's
    dense classification head) and the other heads: params == HF on meta."""
    raw["num_labels"] = labels
    assert txcalc.params(from_hf_dict(raw, head=head)).total == numel(hf_model(raw, head))


@FEW
@given(data=st.data())
def test_training_step_flops_equal_flopcountermode(data):
    """Drawn config, head, batch, any sequence length (padded by HF to a multiple of
    attention_window) and g = 0 .. 4 global tokens (the sequence classifier: at least its
    first token): executed FLOPs == FlopCounterMode on CPU, whatever --attn says."""
    raw = data.draw(longformer(), label="config.json")
    head = data.draw(st.sampled_from(HEADS), label="head")
    raw["num_labels"] = data.draw(st.integers(1, 5), label="num_labels")
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(2, 3 * raw["attention_window"] + 3), label="seq")
    g = data.draw(st.integers(0, min(seq, 4)), label="global_tokens")
    cfg = from_hf_dict(raw, head=head)
    measured = _hf_train_step_flops(raw, head, batch, seq, g)
    for attn in ("eager", "sdpa", "flash"):
        f = count_flops(cfg, Workload(batch=batch, seq=seq, global_tokens=g, attn_impl=attn))
        assert f.forward + f.backward == measured, attn
        assert 0 < f.model <= f.forward + f.backward  # model FLOPs: no padding rows


@pytest.mark.parametrize("g,seq,head", [(0, 5, "none"), (1, 8, "none"), (3, 7, "mlm"),
                                        (0, 8, "seq_cls"), (2, 13, "seq_cls"),
                                        (4, 9, "token_cls")])
def test_global_tokens_and_padding_flops_equal_hf(g, seq, head):
    """Fixed cases of the drawn test above (2 layers, 2 heads, window 4, batch 2): g = 0, 1
    and a few, lengths that are and are not multiples of the window."""
    raw = {"model_type": "longformer", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 30, "intermediate_size": 8,
           "attention_window": 4, "max_position_embeddings": 64, "num_labels": 3}
    f = count_flops(from_hf_dict(raw, head=head), Workload(batch=2, seq=seq, global_tokens=g))
    assert f.forward + f.backward == _hf_train_step_flops(raw, head, 2, seq, g)


@FEW
@given(raw=longformer(), batch=st.integers(1, 2), seq=st.integers(1, 20),
       g=st.integers(0, 3), layers=st.integers(1, 2))
def test_reference_equals_hf_and_the_engine(raw, batch, seq, g, layers):
    """Global attention and padding (any length: HF pads it to a multiple of the window):

    - the reference model with HF's weights gives HF LongformerModel's last hidden state
      (fp32, CPU, the first g tokens global);
    - bytes saved for backward per layer (reference model on meta, saved_tensors_hooks)
      equal the engine's in fp32 and bf16 under none, selective and full recompute;
    - HF LongformerModel on CPU saves per block what the engine says, plus, with more than
      one sequence, one copy of the block input per Linear HF runs on the (S, B, D)
      transpose of it (key and value; with global tokens key_global and value_global too),
      less in bf16 what CPU LayerNorm keeps in bf16 instead of fp32 (the existing test's
      measured differences, tests/conformance/test_encoders.py)."""
    from reference.measure import by_layer, make_inputs, saved_by_module
    from reference.model import build
    from txcalc.engine.memory import TrainingMemory
    raw = dict(raw, num_hidden_layers=layers, layer_norm_eps=1e-5, hidden_dropout_prob=0.0,
               attention_probs_dropout_prob=0.0)
    window, g = raw["attention_window"], min(g, seq)
    cfg = from_hf_dict(raw)
    hf = hf_model(raw, "none", "cpu").eval()
    ref = build(cfg, torch.float32, "cpu").eval()
    ref.global_tokens = g
    _copy_longformer_weights(hf, ref)
    ids = torch.randint(2, raw["vocab_size"], (batch, seq))
    mask = _global_mask(batch, seq, g)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(ref.hidden(ids),
                                   hf(input_ids=ids, global_attention_mask=mask)
                                   .last_hidden_state)

    work = Workload(batch=batch, seq=seq, global_tokens=g)
    padded = -(-seq // window) * window
    for dtype, precision in ((torch.float32, "fp32"), (torch.bfloat16, "bf16-mixed")):
        for recompute in ("none", "selective", "full"):
            model = build(cfg, dtype, "meta", recompute=recompute)
            model.global_tokens = g
            measured, _ = saved_by_module(model, make_inputs(model, batch, seq))
            w = dataclasses.replace(work, recompute=recompute)
            assert {k: v for k, v in TrainingMemory(cfg, w, precision)
                    .activations_by_layer().items() if v} == by_layer(measured), \
                (precision, recompute)
        engine = TrainingMemory(cfg, work, precision).activations_by_layer()
        got = saved_by_block(hf.to(dtype), input_ids=ids, global_attention_mask=mask)
        size = torch.finfo(dtype).bits // 8
        copies = (2 + 2 * (g > 0)) * batch * padded * cfg.d_model * size if batch > 1 else 0
        stats = 2 * 2 * batch * padded * (4 - size)
        assert got == {i: engine[("", i)] + copies - stats for i in range(layers)}, precision


@pytest.mark.parametrize("head,batch,seq,g", [("none", 2, 8, 2), ("mlm", 1, 7, 1),
                                              ("seq_cls", 2, 5, 0), ("token_cls", 1, 9, 3)])
def test_reference_params_flops_and_dropout_with_global_tokens(head, batch, seq, g):
    """The reference model with global tokens and padding under each head: params, FLOPs
    (FlopCounterMode) and, with dropout on, bytes saved per layer == the engine's under each
    recompute mode; HF's dropout masks (a dropout-on step minus the same step in eval mode,
    fp32 on CPU) == the engine's."""
    from reference.measure import by_layer, flops_by_module, make_inputs, saved_by_module
    from reference.model import build
    from txcalc.engine.accounting import count_params
    from txcalc.engine.memory import TrainingMemory
    raw = {"model_type": "longformer", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 30, "intermediate_size": 8,
           "attention_window": 4, "max_position_embeddings": 64, "num_labels": 3}
    cfg = from_hf_dict(raw, head=head)
    model = build(cfg, torch.bfloat16, "meta")
    model.global_tokens = g
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
    _, fwd, bwd = flops_by_module(model, make_inputs(model, batch, seq))
    f = count_flops(cfg, Workload(batch=batch, seq=seq, global_tokens=g))
    assert (fwd, bwd) == (f.forward, f.backward)

    def work(dropout: bool, recompute: str = "none") -> Workload:
        return Workload(batch=batch, seq=seq, global_tokens=g, dropout=dropout,
                        dropout_mask="act", recompute=recompute)
    for recompute in ("none", "selective", "full"):
        ref = build(cfg, torch.bfloat16, "meta", recompute=recompute, dropout=True)
        ref.global_tokens = g
        got, _ = saved_by_module(ref, make_inputs(ref, batch, seq))
        assert {k: v for k, v in TrainingMemory(cfg, work(True, recompute), "bf16-mixed")
                .activations_by_layer().items() if v} == by_layer(got), recompute

    base = from_hf_dict(raw)  # HF's masks: the base model, the first g tokens global
    hf = hf_model(raw, "none", "cpu")
    ids = torch.randint(2, 30, (batch, seq))
    mask = _global_mask(batch, seq, g)
    dropped = dropout_saved_bytes(
        hf, lambda: hf(input_ids=ids, global_attention_mask=mask).last_hidden_state.sum())
    act = lambda w: TrainingMemory(base, w, "fp32").to_json()["activations_bytes"]  # noqa
    assert act(work(True)) - act(work(False)) == dropped > 0


def test_global_tokens_are_checked():
    raw = {"model_type": "longformer", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 1, "vocab_size": 30, "intermediate_size": 8,
           "attention_window": 4}
    with pytest.raises(WorkloadError, match=r"global_tokens \(9\) cannot exceed seq \(8\)"):
        Workload(seq=8, global_tokens=9)
    with pytest.raises(WorkloadError, match=r"global_tokens \(-1\)"):
        Workload(seq=8, global_tokens=-1)
    from txcalc.engine.workload import check_fits
    with pytest.raises(WorkloadError, match=r"global_tokens \(2\).*gpt2 has none"):
        check_fits(txcalc.load("gpt2"), Workload(seq=8, global_tokens=2))
    check_fits(from_hf_dict(raw), Workload(seq=8, global_tokens=2))
    # the sequence classifier's first token: g = 0 and g = 1 cost the same; the base model's
    # g = 0 runs no global attention
    cls, base = from_hf_dict(raw, head="seq_cls"), from_hf_dict(raw)
    flops = lambda c, n: count_flops(c, Workload(batch=2, seq=8, global_tokens=n)).forward  # noqa
    assert flops(cls, 0) == flops(cls, 1) < flops(cls, 2)
    assert flops(base, 0) < flops(base, 1) < flops(base, 2)


def _cli(capsys, args) -> tuple[int, str, str]:
    from txcalc.cli import main
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_global_tokens_and_attn(tmp_path, capsys):
    """`--global-tokens N` on flops and memory (JSON: the count used); bad values exit 2 with
    one line; --attn eager, sdpa and flash give the same Longformer numbers in flops, memory
    and plan train (HF runs only its chunked eager attention)."""
    raw = {"model_type": "longformer", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 30, "intermediate_size": 8,
           "attention_window": 4, "max_position_embeddings": 64}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    cfg = from_hf_dict(raw)
    code, out, _ = _cli(capsys, ["flops", path, "-b", 2, "-s", 7, "--global-tokens", 3, "--json"])
    assert code == 0
    out = json.loads(out)
    f = count_flops(cfg, Workload(batch=2, seq=7, global_tokens=3))
    assert (out["forward_flops"], out["backward_flops"], out["global_tokens"]) == \
        (f.forward, f.backward, 3)
    code, out, _ = _cli(capsys, ["memory", path, "-s", 7, "--global-tokens", 2, "--json"])
    assert code == 0 and json.loads(out)["global_tokens"] == 2
    for bad, words in ((["flops", path, "-s", 7, "--global-tokens", -1], "--global-tokens ('-1')"),
                       (["memory", path, "-s", 7, "--global-tokens", 8],
                        "global_tokens (8) cannot exceed seq (7)"),
                       (["flops", "gpt2", "-s", 7, "--global-tokens", 1],
                        "global_tokens (1) applies to models with global attention"),
                       (["plan", "train", path, "--seq", 7, "--tokens", "1e6",
                         "--global-tokens", 8], "global_tokens (8) cannot exceed seq (7)")):
        code, out, err = _cli(capsys, bad)
        assert code == 2 and out == "" and words in err and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err
    for cmd in (["flops", path, "-b", 2, "-s", 7, "--global-tokens", 1],
                ["memory", path, "-b", 2, "-s", 7, "--global-tokens", 1],
                ["plan", "train", path, "--seq", 7, "--tokens", "1e6"]):
        outs = []
        for attn in ("eager", "sdpa", "flash"):
            code, out, err = _cli(capsys, cmd + ["--attn", attn, "--json"])
            assert code == 0, err
            outs.append({k: v for k, v in json.loads(out).items() if "attn" not in k})
        assert outs[0] == outs[1] == outs[2], cmd
    # plan train reads --global-tokens too: more global tokens, more work per step
    mfu = []
    for g in (0, 3):
        code, out, err = _cli(capsys, ["plan", "train", path, "--seq", 7, "--tokens", "1e6",
                                       "--global-tokens", g, "--json"])
        assert code == 0, err
        mfu.append(json.loads(out)["mfu"])
    assert mfu[0] != mfu[1]


@pytest.mark.parametrize("head,seq,g", [("none", 8, 0), ("none", 7, 2), ("seq_cls", 13, 0),
                                        ("seq_cls", 8, 3), ("mlm", 7, 1)])
def test_memory_by_phase_equals_memtracker(head, seq, g):
    """A whole training step of the reference model (MemTracker on the CPU, fp32, AdamW,
    reference/train.py) against TrainingMemory.phases(): after forward, after backward and
    after the optimizer step exact, by total. With no global token the global projections
    get no gradient and AdamW keeps no state for them; a padded sequence keeps the caller's
    ids beside the padded copy. (The masked LM is checked after forward only: its labels are
    a copy the reference makes inside the step, which the engine counts as an input held
    after backward, the convention of every masked-LM encoder.)"""
    from reference.train import memory_by_phase
    from txcalc.engine.memory import TrainingMemory
    raw = {"model_type": "longformer", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 30, "intermediate_size": 8,
           "attention_window": 4, "max_position_embeddings": 64, "hidden_dropout_prob": 0.0,
           "attention_probs_dropout_prob": 0.0, "num_labels": 3}
    cfg = from_hf_dict(raw, head=head)
    work = Workload(batch=2, seq=seq, global_tokens=g)
    measured = memory_by_phase(cfg, work, "fp32", "adamw")
    predicted = TrainingMemory(cfg, work, "fp32", "adamw").phases()
    for phase in ("after_forward",) if head == "mlm" else ("after_forward", "after_backward",
                                                            "after_step"):
        assert measured[phase]["total"] == predicted[phase]["total"], phase


def test_mixed_precision_step_without_global_tokens_runs_and_matches_grads_and_states():
    """reference/train.py's mixed-precision step on a Longformer with no global token (its
    global projections get no gradient): the step runs (it raised on the None gradient,
    copying it to the fp32 master) and its gradients and optimizer states after the step are
    the engine's. The fp32 masters differ by design: the reference builds one for every
    trainable parameter before the first step, the engine counts masters per parameter that
    trains in the step (engine.memory.unreached_untrained)."""
    from reference.train import memory_by_phase
    from txcalc.engine.memory import TrainingMemory
    raw = {"model_type": "longformer", "hidden_size": 16, "num_attention_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 30, "intermediate_size": 8,
           "attention_window": 4, "max_position_embeddings": 64, "hidden_dropout_prob": 0.0,
           "attention_probs_dropout_prob": 0.0}
    cfg = from_hf_dict(raw, head="none")
    work = Workload(batch=2, seq=8, global_tokens=0)
    measured = memory_by_phase(cfg, work, "bf16-mixed", "adamw")["after_step"]
    predicted = TrainingMemory(cfg, work, "bf16-mixed", "adamw").phases()["after_step"]
    assert [measured[k] for k in ("param", "grad", "opt")] == \
        [predicted[k] for k in ("param", "grad", "opt")]
