"""QLoRA as Lightning Fabric quantises it and litgpt's loop keeps it (engine.finetune's
quantizer table and ``Finetune.keeps_previous``), against the code that runs on the CPU:
HF transformers' Llama in bf16 and bitsandbytes' 4-bit kernels.

- The dequantised weight: Fabric quantises from fp16 (``finetune.FABRIC``), so bitsandbytes
  dequantises into the quant state's fp16 and MatMul4Bit casts that to bf16 (``BNB_042``):
  the two copies' bytes, measured on the largest quantised Linear of the model (the head, which
  Fabric quantises too), are the engine's ``dequant_bytes``; quantised from bf16 (transformers,
  the head skipped) one copy of the largest block Linear.
- The inputs bitsandbytes < 0.43.2 holds on its autograd context (``ctx.tensors = (A, B)``,
  what a loop that keeps its loss bound keeps of the previous micro-batch): every quantised
  nn.Linear's input that needs a gradient, recorded by forward pre-hooks on HF's model and
  counted by storage (q, k, v read one tensor; gate and up one), are the engine's
  ``bnb_ctx_input_bytes``, with and without the head.
Nothing here re-types a formula: the bytes come from running the model's and bitsandbytes'
code.
"""

from __future__ import annotations

import json

import pytest

from txcalc.engine.finetune import Finetune, bnb_ctx_input_bytes
from txcalc.engine.memory import TrainingMemory
from txcalc.engine.workload import Workload

# test_recipes' tiny Llama: the head (100 x 64) is the largest Linear, the MLP's (96 x 64)
# the largest in the blocks
from .test_recipes import BATCH, RAW, SEQ, torch, transformers


@pytest.fixture(scope="module")
def hf_llama(tmp_path_factory):
    """(the bf16 model, txcalc's config of it)."""
    import txcalc
    d = tmp_path_factory.mktemp("fabric_qlora")
    (d / "config.json").write_text(json.dumps(RAW))
    cfg = transformers.LlamaConfig(**{k: v for k, v in RAW.items()
                                      if k not in ("model_type", "architectures")})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    return model, txcalc.load(str(d / "config.json"))


def _finetune(quantizer: str) -> Finetune:
    return Finetune("qlora", 8, targets="q_proj,v_proj", double_quant=False,
                    bnb_saves_input=True, quantizer=quantizer, keeps_previous=True)


def _memory(cfg, quantizer: str) -> TrainingMemory:
    return TrainingMemory(cfg, Workload(batch=BATCH, seq=SEQ, attn_impl="flash",
                                        loss="chunked:4"),
                          precision="bf16", finetune=_finetune(quantizer))


@pytest.mark.parametrize("quantizer", ["fabric", "transformers"])
def test_the_dequantised_weight_and_its_cast_are_the_engines_dequant_bytes(hf_llama, quantizer):
    bnb_f = pytest.importorskip("bitsandbytes.functional")
    model, cfg = hf_llama
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
               and (quantizer == "fabric" or n != "lm_head")]
    _, largest = max(linears, key=lambda nm: nm[1].weight.numel())
    w = largest.weight.detach()
    # Fabric: w.contiguous().to(dtype=torch.half) before quantize_4bit; transformers: as is
    src = w.half() if quantizer == "fabric" else w
    q, state = bnb_f.quantize_4bit(src, blocksize=64, compress_statistics=False,
                                   quant_type="nf4")
    deq = bnb_f.dequantize_4bit(q, state)  # in the quant state's dtype
    cast = deq.to(torch.bfloat16)  # MatMul4Bit: .to(A.dtype), A in bf16
    both = deq.untyped_storage().nbytes() + (
        cast.untyped_storage().nbytes() if cast.data_ptr() != deq.data_ptr() else 0)
    assert deq.dtype == (torch.float16 if quantizer == "fabric" else torch.bfloat16)
    assert _memory(cfg, quantizer).dequant_bytes == both


@pytest.mark.parametrize("quantizer", ["fabric", "transformers"])
def test_context_held_inputs_are_the_quantised_linears_inputs(hf_llama, quantizer):
    model, cfg = hf_llama
    held: dict[int, int] = {}
    hooks = []

    def record(_mod, args):
        a = args[0]
        if a.requires_grad:  # MatMul4Bit: ctx.tensors = (A, B) when an input needs a gradient
            s = a.untyped_storage()
            held[s.data_ptr()] = s.nbytes()
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and (quantizer == "fabric" or name != "lm_head"):
            hooks.append(mod.register_forward_pre_hook(record))
    model.enable_input_require_grads()  # the engine's convention: the embedding output too
    try:
        ids = torch.randint(0, RAW["vocab_size"], (BATCH, SEQ))
        model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    mem = _memory(cfg, quantizer)
    assert bnb_ctx_input_bytes(cfg, mem.ops, mem.work, 2) == sum(held.values())
    # the previous micro-batch's held inputs sit beside this one's activations at the forward
    # peak; a first step has none
    assert mem.phases()["after_forward"]["act"] - mem.phases(first_step=True)[
        "after_forward"]["act"] == sum(held.values())


def test_a_context_attribute_outlives_backward_while_the_loss_is_bound():
    """The premise of ``keeps_previous`` with bitsandbytes < 0.43.2: PyTorch frees what
    save_for_backward kept when backward has run, not a tensor held as an attribute of the
    context (MatMul4Bit's ``ctx.tensors = (A, B)``), which lives as long as the graph, i.e.
    as long as the loop keeps its loss bound."""
    import gc
    import weakref

    class Held(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, w, attribute: bool):
            if attribute:
                ctx.tensors = (a, w)
            else:
                ctx.save_for_backward(a, w)
            ctx.attribute = attribute
            return a @ w

        @staticmethod
        def backward(ctx, g):
            _, w = ctx.tensors if ctx.attribute else ctx.saved_tensors
            return g @ w.t(), None, None

    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 8)
    for attribute in (True, False):
        h = x * 2
        ref = weakref.ref(h)
        loss = Held.apply(h, w, attribute).sum()
        del h
        loss.backward()
        gc.collect()
        assert (ref() is not None) == attribute
        del loss
        gc.collect()
        assert ref() is None
