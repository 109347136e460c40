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
from txcalc.memory import TrainingMemory
from txcalc.workload import Workload

from .hf_models import hf_model, torch

DATA = Path(__file__).parent / "data" / "hf"


def measured_by_layer(raw: dict, batch: int, seq: int) -> dict[int, int]:
    model = hf_model(raw).to(torch.bfloat16)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    per_module, _ = saved_bytes_by_module(model, lambda: model(input_ids=ids, labels=ids))
    out: collections.Counter = collections.Counter()
    for path, nbytes in per_module.items():
        m = re.search(r"\.(?:h|layers)\.(\d+)", path)
        out[int(m.group(1)) if m else -1] += nbytes
    return dict(out)


def predicted_and_measured(name, softmax_fp32, batch, seq):
    raw = json.loads((DATA / f"{name}.json").read_text())
    raw = {**raw, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}  # dropout off
    mem = TrainingMemory(txcalc.load(name), Workload(batch=batch, seq=seq,
                                                     softmax_fp32=softmax_fp32))
    predicted = {layer: b for (stack, layer), b in mem.activations_by_layer().items()}
    return predicted, measured_by_layer(raw, batch, seq)


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
