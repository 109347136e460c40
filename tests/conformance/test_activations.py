"""Bytes saved for backward: engine vs torch.autograd.graph.saved_tensors_hooks, per layer.

The HF model runs its forward (with the loss) on the meta device in bf16 with eager
attention; every saved tensor is attributed to the block that packed it and counted once per
storage (reference/saved.py).
"""

import collections
import json
import re
from pathlib import Path

import pytest

import txcalc
from reference.saved import saved_bytes_by_module
from txcalc.engine.memory import TrainingMemory
from txcalc.engine.workload import Workload

from ..hf_models import hf_config, hf_model, torch, transformers

DATA = Path(__file__).parents[1] / "data" / "hf"


def _by_layer(per_module: dict[str, int]) -> dict[int, int]:
    out: collections.Counter = collections.Counter()
    for path, nbytes in per_module.items():
        m = re.search(r"\.(?:h|layers)\.(\d+)", path)
        out[int(m.group(1)) if m else -1] += nbytes
    return dict(out)


def measured_by_layer(raw: dict, batch: int, seq: int, fake: bool = False) -> dict[int, int]:
    """Eager attention on meta; or SDPA under FakeTensorMode, where torch runs its CPU flash
    kernel (no S x S stored), in training mode (dropout as the config says)."""
    if not fake:
        model = hf_model(raw).to(torch.bfloat16).train()
        ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
        per_module, _ = saved_bytes_by_module(model, lambda: model(input_ids=ids, labels=ids))
        return _by_layer(per_module)
    from torch._subclasses.fake_tensor import FakeTensorMode

    cfg = hf_config(raw)
    cfg._attn_implementation = "sdpa"
    with FakeTensorMode():
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).train()
        ids = torch.zeros(batch, seq, dtype=torch.long)
        per_module, _ = saved_bytes_by_module(model, lambda: model(input_ids=ids, labels=ids))
    return _by_layer(per_module)


NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def predicted_and_measured(name, softmax_fp32, batch, seq, dropout=False, fake=False):
    raw = json.loads((DATA / f"{name}.json").read_text())
    if not dropout:
        raw = {**raw, **NO_DROPOUT}
    work = Workload(batch=batch, seq=seq, softmax_fp32=softmax_fp32, dropout=dropout,
                    dropout_mask="act", attn_impl="flash" if fake else "eager",
                    fused_qkv=name == "gpt2")
    mem = TrainingMemory(txcalc.load(name), work)
    predicted = {layer: b for (stack, layer), b in mem.activations_by_layer().items()}
    return predicted, measured_by_layer(raw, batch, seq, fake)


# GPT-2's eager attention keeps the softmax in the model dtype; Llama's upcasts it to fp32.
@pytest.mark.parametrize("name,softmax_fp32", [("gpt2", False), ("llama-3-8b", True)])
@pytest.mark.parametrize("batch,seq", [(2, 128), (2, 512), (4, 256)])
def test_saved_bytes_per_layer_equal_hooks(name, softmax_fp32, batch, seq):
    predicted, measured = predicted_and_measured(name, softmax_fp32, batch, seq)
    assert predicted == measured


@pytest.mark.parametrize("name,softmax_fp32", [("gpt2", False), ("llama-3-8b", True)])
def test_batch_one_storage_aliasing_is_named_and_exact(name, softmax_fp32):
    """At batch 1 some reshapes are views, not copies, and a saved view keeps its whole base
    storage alive. The engine does not model aliasing; these are the two differences:
    - the shifted labels stay a view of the padded (s + 1)-long row: +8 bytes;
    - GPT-2 only: k is a view of the fused c_attn output (q, k and v in one storage), so the
      whole 3-wide output stays alive instead of k alone: +2 * T * D * 2 bytes per layer
      (6.7% of a GPT-2 layer at s=128; Llama's separate k/v projections have no such view).
    """
    seq = 128
    predicted, measured = predicted_and_measured(name, softmax_fp32, 1, seq)
    assert measured[-1] - predicted[-1] == 8
    per_layer = 2 * seq * 768 * 2 if name == "gpt2" else 0
    for layer in range(txcalc.load(name).n_layers):
        assert measured[layer] - predicted[layer] == per_layer


def test_korthikanti_no_dropout_form_for_a_gpt2_block_with_native_gelu():
    # Korthikanti et al. 2022 (arXiv:2205.05198) eq. 2 without dropout masks: sbh(32 + 2as/h)
    # ... per layer in 16-bit, plus the two LayerNorms' fp32 statistics (4 x 4 bytes per token).
    cfg = txcalc.load("gpt2").replace(activation="gelu_tanh")
    s, b, h, a = 1024, 1, 768, 12
    mem = TrainingMemory(cfg, Workload(batch=b, seq=s, softmax_fp32=False))
    layer = mem.activations_by_layer()[("", 5)]
    assert layer == s * b * h * (32 + 2 * a * s // h) + 16 * s * b


def test_recompute_full_keeps_one_tensor_per_block_and_selective_drops_s_squared():
    cfg = txcalc.load("llama-3-8b")
    full = TrainingMemory(cfg, Workload(batch=1, seq=4096, recompute="full"))
    assert full.activations_by_layer()[("", 3)] == 4096 * 4096 * 2
    none = TrainingMemory(cfg, Workload(batch=1, seq=4096))
    sel = TrainingMemory(cfg, Workload(batch=1, seq=4096, recompute="selective"))
    assert none.activations - sel.activations == 32 * 32 * 4096 * 4096 * (4 + 2)


@pytest.mark.parametrize("batch,seq", [(2, 128), (4, 256)])
def test_gpt2_dropout_masks_per_layer_equal_hooks(batch, seq):
    """GPT-2 trains with dropout 0.1 on the embeddings, the attention probabilities and both
    sub-block outputs: each keeps its mask (in bf16 on meta/CPU: ``dropout_mask="act"``), and
    the attention keeps the dropped probabilities beside the softmax output."""
    predicted, measured = predicted_and_measured("gpt2", False, batch, seq, dropout=True)
    assert predicted == measured
    off = predicted_and_measured("gpt2", False, batch, seq)[0]
    T, a = batch * seq, 2
    assert predicted[0] - off[0] == 2 * T * 768 * a + 2 * batch * 12 * seq * seq * a


def test_llama_fused_sdpa_per_layer_equals_hooks_under_fake_tensors():
    """The CPU flash kernel keeps q, k and v with K heads (no repeat), its output (o_proj's
    input) and a fp32 logsumexp per query row and head; no S x S."""
    predicted, measured = predicted_and_measured("llama-3-8b", True, 2, 256, fake=True)
    assert predicted == measured


def test_gpt2_fused_sdpa_differs_only_by_cpu_layernorm_statistics():
    """Named difference (under 1%): torch's CPU layer_norm keeps mean and 1/std in the input
    dtype (bf16), CUDA and meta in fp32, which the engine models: 2 norms x 2 statistics x
    T x 2 bytes less per block (and one norm's worth outside). GPT-2's fused c_attn: the saved
    q is a view that keeps all of q, k and v alive (``Workload.fused_qkv``)."""
    batch, seq = 2, 256
    predicted, measured = predicted_and_measured("gpt2", False, batch, seq, fake=True)
    T = batch * seq
    for layer in range(12):
        assert predicted[layer] - measured[layer] == 2 * 2 * T * 2
        assert (predicted[layer] - measured[layer]) / measured[layer] < 0.01
    assert predicted[-1] - measured[-1] == 2 * T * 2


def test_korthikanti_full_form_with_dropout_masks():
    # Korthikanti et al. 2022 (arXiv:2205.05198) eq. 2: sbh(34 + 5as/h) per layer, 16-bit
    # activations, 1-byte dropout masks (CUDA), softmax in 16-bit, native GELU: the engine set
    # to Megatron's kernels, plus the two LayerNorms' fp32 statistics (16 bytes per token).
    cfg = txcalc.load("gpt2").replace(activation="gelu_tanh")
    s, b, h, a = 1024, 2, 768, 12
    mem = TrainingMemory(cfg, Workload(batch=b, seq=s, softmax_fp32=False, dropout=True))
    layer = mem.activations_by_layer()[("", 5)]
    assert layer == s * b * h * (34 + 5 * a * s // h) + 16 * s * b


def test_encoder_ops_save_per_source_token():
    """In an encoder-decoder model every encoder op (norms included) runs over the source
    tokens: lengthening the source grows the encoder (its final norm too) and the decoder's
    cross-attention, not the decoder's own final norm or the head; outside the stacks only
    the source token ids grow (one int64 per source token)."""
    cfg = txcalc.load("t5-small")
    short = TrainingMemory(cfg, Workload(batch=2, seq=64, src_seq=96)).activations_by_layer()
    long = TrainingMemory(cfg, Workload(batch=2, seq=64, src_seq=97)).activations_by_layer()
    assert long[("decoder", -1)] == short[("decoder", -1)]
    assert long[("", -1)] - short[("", -1)] == 2 * 8
    assert all(long[k] > short[k] for k in short if k[0] == "encoder")
