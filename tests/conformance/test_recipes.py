"""Fine-tuning recipes (txcalc/engine/recipes.py) against the code they model, run on the CPU:
HF transformers + bitsandbytes 4-bit (NF4, double quantisation) + PEFT's
``prepare_model_for_kbit_training`` and ``get_peft_model``, the hf-peft recipe's path.

- parameter and quant-state bytes of the 4-bit model before and after
  ``prepare_model_for_kbit_training`` equal the engine's weights without and with the recipe's
  fp32 upcast (``Finetune.upcast``), byte for byte;
- the block inputs that gradient checkpointing keeps (the tensors handed to the model's
  checkpoint function, under the HF Trainer's bf16 autocast) are fp32, and their bytes are
  the engine's ``checkpoint.input`` rows under full recompute.
Nothing here re-types a formula: each side comes from running the other's code.
"""

from __future__ import annotations

import json

import pytest

from txcalc.engine.finetune import Finetune
from txcalc.engine.memory import TrainingMemory
from txcalc.engine.recipes import RECIPES, get_recipe
from txcalc.engine.workload import Workload
from txcalc.errors import TxcalcError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
# bitsandbytes and peft are imported by the fixture that needs them (5 CPU seconds that every
# xdist worker would pay at collection, most of them for a file they never run)

RAW = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
       "vocab_size": 100, "max_position_embeddings": 128, "tie_word_embeddings": False,
       "architectures": ["LlamaForCausalLM"]}
BATCH, SEQ, RANK = 2, 16, 8


def _param_bytes(model) -> int:
    seen, n = set(), 0
    for p in model.parameters():
        s = p.untyped_storage()
        if s._cdata not in seen:
            seen.add(s._cdata)
            n += s.nbytes()
    return n


def _quant_state_bytes(model) -> int:
    """The tensors of each Params4bit's quant state (absmax, code book; nested: the second
    level's absmax, code book and offset): not parameters, on the device beside them."""
    n = 0
    for mod in model.modules():
        qs = getattr(getattr(mod, "weight", None), "quant_state", None)
        if qs is None:
            continue
        ts = [qs.absmax, qs.code] + ([qs.state2.absmax, qs.state2.code, qs.offset]
                                     if qs.nested else [])
        n += sum(t.numel() * t.element_size() for t in ts)
    return n


@pytest.fixture(scope="module")
def hf_qlora(tmp_path_factory):
    """(bytes before prepare, bytes after, checkpoint-function tensor args, txcalc config)."""
    import txcalc
    pytest.importorskip("bitsandbytes")
    peft = pytest.importorskip("peft")
    d = tmp_path_factory.mktemp("recipes")
    cfg = transformers.LlamaConfig(**{k: v for k, v in RAW.items()
                                      if k not in ("model_type", "architectures")})
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d / "m")
    (d / "config.json").write_text(json.dumps(RAW))
    bnb = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                          bnb_4bit_use_double_quant=True,
                                          bnb_4bit_compute_dtype=torch.bfloat16)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d / "m", dtype=torch.bfloat16, quantization_config=bnb, device_map="cpu")
    before = _param_bytes(model) + _quant_state_bytes(model)
    model = peft.prepare_model_for_kbit_training(model)  # gradient checkpointing on, too
    after = _param_bytes(model) + _quant_state_bytes(model)
    model = peft.get_peft_model(model, peft.LoraConfig(r=RANK, lora_alpha=2 * RANK,
                                                       target_modules="all-linear"))
    layers = model.base_model.model.model.layers
    kept = []
    inner = layers[0]._gradient_checkpointing_func

    def recording(fn, *args, **kw):
        kept.extend(t for t in args if torch.is_tensor(t))
        return inner(fn, *args, **kw)
    for layer in layers:
        layer._gradient_checkpointing_func = recording
    model.train()
    ids = torch.randint(0, RAW["vocab_size"], (BATCH, SEQ))
    saved = []  # what autograd saves outside the checkpoints (the head, the loss)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the Trainer's bf16=True
        with torch.autograd.graph.saved_tensors_hooks(
                lambda t: saved.append((tuple(t.shape), t.dtype)) or t, lambda t: t):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    return before, after, kept, txcalc.load(str(d / "config.json")), saved


def _memory(cfg, upcast: bool, recompute: str = "full") -> TrainingMemory:
    return TrainingMemory(cfg, Workload(batch=BATCH, seq=SEQ, recompute=recompute),
                          finetune=Finetune("qlora", RANK, targets="all-linear",
                                            upcast=upcast))


def test_prepare_model_for_kbit_training_bytes_equal_the_upcast(hf_qlora):
    """The 4-bit model's parameters and quant states, before and after PEFT's upcast, are the
    engine's frozen weights without and with ``upcast`` (adapters excluded on both sides)."""
    before, after, _, cfg, _ = hf_qlora
    plain, up = _memory(cfg, False), _memory(cfg, True)
    assert before == plain.weights - plain.adapter_bytes
    assert after == up.weights - up.adapter_bytes
    assert after > before


def test_checkpointed_block_inputs_are_fp32_and_their_bytes(hf_qlora):
    """The fp32 embedding makes the residual stream fp32: every block input the checkpoint
    keeps is fp32 under autocast, and the engine's checkpoint rows hold those bytes (in the
    policy's 16 bits without the upcast)."""
    _, _, kept, cfg, _ = hf_qlora
    hidden = [t for t in kept if t.dim() == 3]
    assert len(hidden) == RAW["num_hidden_layers"]
    assert {t.dtype for t in hidden} == {torch.float32}
    measured = sum(t.numel() * t.element_size() for t in hidden)

    ckpt = {op.path for op in _memory(cfg, True).ops if op.component == "checkpoint.input"}
    up = sum(b for p, b in _memory(cfg, True).activations_by_op().items() if p in ckpt)
    plain = sum(b for p, b in _memory(cfg, False).activations_by_op().items() if p in ckpt)
    assert up == measured == 2 * plain


def test_the_upcast_heads_16_bit_weight_copy_is_saved_once(hf_qlora):
    """Under autocast the fp32 lm_head computes in bf16: autocast casts its frozen weight for
    the matmul (no cast cache for a weight that needs no gradient) and the matmul saves that
    copy for the input gradient, V x d in bf16, once a forward: the engine's ``saved_once`` row
    of the upcast head (none without the upcast, whose head weight is already bf16)."""
    *_, cfg, saved = hf_qlora
    V, d = RAW["vocab_size"], RAW["hidden_size"]
    copies = [s for s in saved if s[1] == torch.bfloat16 and sorted(s[0]) == sorted((V, d))]
    assert len(copies) == 1
    head = {q: next(op for op in _memory(cfg, q).ops if op.path == "lm_head")
            for q in (True, False)}
    assert head[True].saved_once == ((V * d, "a"),) and head[False].saved_once == ()
    # the activation bytes differ by exactly that copy (2 bytes a weight under bf16 autocast)
    assert _memory(cfg, True, "none").activations - _memory(cfg, False, "none").activations \
        == 2 * V * d


def test_lora_and_full_recompute_none_are_untouched():
    """The upcast is QLoRA's (a k-bit base): LoRA on a 16-bit base and recompute none keep
    their bytes; every recipe names a source for each item."""
    import txcalc
    cfg = txcalc.load("llama-3.2-1b")
    w = Workload(batch=1, seq=256)
    lora = [TrainingMemory(cfg, w, finetune=Finetune("lora", upcast=u)) for u in (False, True)]
    assert lora[0].total == lora[1].total
    q = [TrainingMemory(cfg, w, finetune=Finetune("qlora", upcast=u)) for u in (False, True)]
    # under recompute none no checkpoint is kept: only the head's 16-bit copy of the fp32
    # weight differs (here the tied table's)
    assert cfg.tie_embeddings
    assert q[1].activations - q[0].activations == cfg.d_model * cfg.vocab_size * 2
    assert q[1].weights > q[0].weights
    for r in RECIPES.values():  # and its full fine-tune config where it declares one,
        # what its compile switch fuses beyond the blocks and its in-place MLP kernel
        assert {k for k, _ in r.sources} == {"upcast", "checkpointing", "loss", "optimizer"} \
            | ({"full"} if r.full_optimizer is not None else set()) \
            | ({"compile"} if r.compiled != ("layers",) else set()) \
            | ({"mlp"} if r.mlp_inplace else set())


def test_unknown_recipe_is_refused_naming_the_choices():
    with pytest.raises(TxcalcError, match=r"--recipe 'peft' is not a recipe; choose one of "
                                          r"hf-peft, trl-sft"):
        get_recipe("peft")
