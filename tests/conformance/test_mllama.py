"""Mllama (Llama 3.2 Vision, issue 12): gated cross-attention layers and the vision tower.

Against Hugging Face, configs drawn by hypothesis from MllamaConfig / MllamaTextConfig (fields
left out half the time, so that the class defaults are read): ``txcalc params`` equals the
numel of MllamaForConditionalGeneration (vision tower and projector included) and of
MllamaForCausalLM on meta; one training step's forward + backward FLOPs equal
FlopCounterMode on MllamaForCausalLM given ``cross_attention_states`` (eager attention).

Convention: the vision states are an input that needs no gradient (the vision tower's and
projector's work is not modelled, as for every VLM: ``vision`` is a params-only op), so the
k/v projections of the cross layers count no input gradient; MllamaForCausalLM given states
runs exactly that.

Against the reference model (tests/conformance/test_reference.py's checks): parameters, FLOPs and bytes
saved for backward per layer (none, selective and full recompute; bf16 and fp32) of the
engine's ``gated_cross_block``; the KV cache after generate() (the cross layers keep the
vision states' keys and values, constant in context).
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import txcalc
from txcalc.engine.accounting import count_flops, count_params
from txcalc.model.hf import from_hf_dict
from txcalc.engine.kvcache import kv_cache_bytes
from txcalc.engine.memory import TrainingMemory
from txcalc.engine.workload import Workload

from .strategies.mllama import text_config, vision_config
from tests.conformance.test_hf_drawn_configs import SETTINGS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from reference.measure import (by_layer, flops_by_module, kv_cache_after_generate,  # noqa: E402
                               make_inputs, saved_by_module)
from reference.model import build  # noqa: E402

REF = dict(derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


def hf(cls, config):
    config._attn_implementation = "eager"
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(config)


def numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


@SETTINGS
@given(text=text_config(), vision=vision_config())
def test_params_equal_mllama_for_conditional_generation_and_causal_lm(text, vision):
    raw = {"model_type": "mllama", "text_config": text, "vision_config": vision}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        composite = transformers.MllamaConfig(**json.loads(json.dumps(
            {k: v for k, v in raw.items() if k != "model_type"})))
        text_only = transformers.MllamaTextConfig(**text)
    cfg = from_hf_dict(raw)
    whole = hf(transformers.MllamaForConditionalGeneration, composite)
    assert txcalc.params(cfg).total == numel(whole)
    assert cfg.vision_params == numel(whole.model.vision_model) + \
        numel(whole.model.multi_modal_projector)
    causal = hf(transformers.MllamaForCausalLM, text_only)
    text_cfg = from_hf_dict(text | {"model_type": "mllama_text_model"})
    assert txcalc.params(text_cfg).total == numel(causal) == txcalc.params(cfg).total - \
        cfg.vision_params
    layers = causal.model.layers
    assert [i for i, blk in enumerate(layers) if hasattr(blk, "cross_attn")] == \
        list(text_cfg.cross_layers)
    # one image: max_num_tiles x (patches + 1) vision-state rows, one <|image|> token
    assert cfg.image_states == whole.model.vision_model.max_num_tiles * \
        whole.model.vision_model.num_patches
    assert cfg.image_seq_tokens(2) == 2


@SETTINGS.__class__(parent=SETTINGS, max_examples=max(3, SETTINGS.max_examples // 3))
@given(text=text_config(), data=st.data())
def test_training_step_flops_equal_flopcountermode(text, data):
    cfg = from_hf_dict(text | {"model_type": "mllama_text_model"})
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, 12), label="seq")
    src = data.draw(st.integers(1, 20), label="vision rows")
    f = count_flops(cfg, Workload(batch=batch, seq=seq, src_seq=src))
    assert f.forward + f.backward == hf_step_flops(text, batch, seq, src)


def hf_step_flops(text: dict, batch: int, seq: int, src: int) -> int:
    """FlopCounterMode's FLOPs of one training step of MllamaForCausalLM on meta, given
    ``src`` rows of vision states (0: none, text-only input)."""
    from torch.utils.flop_counter import FlopCounterMode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = hf(transformers.MllamaForCausalLM, transformers.MllamaTextConfig(**text))
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    states = (torch.zeros(batch, src, model.config.hidden_size, device="meta") if src
              else None)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids, cross_attention_states=states).loss.backward()
    return counter.get_total_flops()


@SETTINGS.__class__(parent=SETTINGS, max_examples=max(3, SETTINGS.max_examples // 3))
@given(text=text_config(), data=st.data())
def test_text_only_step_flops_equal_flopcountermode(text, data):
    """Without vision states (``--images 0``) HF's MllamaTextModel skips the cross-attention
    blocks: a text-only step (Workload.text_only, components.step_ops) counts what
    FlopCounterMode counts on MllamaForCausalLM given no ``cross_attention_states``."""
    cfg = from_hf_dict(text | {"model_type": "mllama_text_model"})
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(1, 12), label="seq")
    f = count_flops(cfg, Workload(batch=batch, seq=seq, text_only=True))
    assert f.forward + f.backward == hf_step_flops(text, batch, seq, 0)


def hf_saved_bytes(text: dict, batch: int, seq: int, dtype) -> tuple[int, dict[int, int]]:
    """Bytes one text-only training step of MllamaForCausalLM (eager, on meta, in ``dtype``)
    saves for backward (saved_tensors_hooks, unique storages): (total, {block: bytes})."""
    import re

    from reference.saved import saved_bytes_by_module
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = hf(transformers.MllamaForCausalLM, transformers.MllamaTextConfig(**text))
        model = model.to(dtype)
        ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
        per, _ = saved_bytes_by_module(model, lambda: model(input_ids=ids, labels=ids).loss)
    blocks: dict[int, int] = {}
    for path, b in per.items():
        if m := re.match(r"model\.layers\.(\d+)\.", path):
            blocks[int(m[1])] = blocks.get(int(m[1]), 0) + b
    return sum(per.values()), blocks


def one_gpu_plan(cfg, batch: int, seq: int, precision: str):
    """``plan train``'s row for one GPU, one micro-batch of ``batch`` sequences of ``seq``
    tokens, eager attention, no recompute: a single step (tokens = batch x seq)."""
    from txcalc.train.planner import plan_train
    only = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": 0, "micro_batch": batch,
            "recompute": "none"}
    return plan_train(cfg, "h100", batch * seq, seq=seq, global_batch=batch, gpus=1,
                      attn_impl="eager", precision=precision, only=only, n_rows=1)


@settings(max_examples=6, **REF)
@given(text=text_config(), data=st.data(), fp32=st.booleans())
def test_text_only_training_step_saved_bytes_and_flops_equal_hf(text, data, fp32):
    """A text-only training step (no images: ``memory`` without --images, ``plan train``):
    the bytes saved for backward equal saved_tensors_hooks on MllamaForCausalLM given no
    ``cross_attention_states`` (its cross-attention blocks save nothing, the engine's neither),
    in ``memory`` (TrainingMemory) and in ``plan train``'s row; the planner's step FLOPs equal
    FlopCounterMode on the same step. Two sequences: at batch 1 HF's loss keeps a view of its
    padded labels and GQA's expand stays a view, which the engine (modelled on copies, as at
    any larger batch) does not count: a gap of every text model, not of the cross blocks."""
    cfg = from_hf_dict(text | {"model_type": "mllama_text_model"})
    batch = 2
    seq = data.draw(st.integers(2, 10), label="seq")
    dtype, precision = (torch.float32, "fp32") if fp32 else (torch.bfloat16, "bf16-mixed")
    total, blocks = hf_saved_bytes(text, batch, seq, dtype)
    work = Workload(batch=batch, seq=seq, text_only=True)
    mem = TrainingMemory(cfg, work, precision)
    assert mem.activations == total
    per_layer = {layer: b for (_, layer), b in mem.activations_by_layer().items() if layer >= 0}
    assert all(per_layer[i] == 0 and i not in blocks for i in cfg.cross_layers)
    row = one_gpu_plan(cfg, batch, seq, precision).rows[0]
    assert row.memory["activations"] == total
    assert row.hardware_flops_step == hf_step_flops(text, batch, seq, 0)


def text_only_step_states(model, batch: int, seq: int) -> tuple[dict, int, set]:
    """One steady text-only training step of an HF Mllama ``model`` on the CPU (fp32,
    torch.optim.AdamW foreach; the second step, the states made by the first) under MemTracker:
    ({"grad": bytes after backward, "opt": bytes after the step}, the numel of the parameters
    whose .grad is not None, the names of those with no .grad or no optimizer state)."""
    from torch.distributed._tools.mem_tracker import MemTracker
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    tracker = MemTracker()
    tracker.track_external(model, opt)
    ids = torch.randint(1, model.config.get_text_config().vocab_size, (batch, seq))

    def snap():
        cats = next(iter(tracker.get_tracker_snapshot().values()))
        return {str(k).rpartition(".")[2].lower(): v for k, v in cats.items()}
    with tracker:
        for step in range(2):
            if step:
                tracker.reset_mod_stats()
            model(input_ids=ids, labels=ids).loss.backward()
            grad = snap()["grad"]
            opt.step()
            if step == 1:
                out = {"grad": grad, "opt": snap()["opt"]}
                with_grad = sum(p.numel() for p in model.parameters() if p.grad is not None)
                idle = {n for n, p in model.named_parameters()
                        if p.grad is None or p not in opt.state}
            opt.zero_grad(set_to_none=True)
    return out, with_grad, idle


def cpu_model(cls, config):
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(config)


def assert_text_only_states(cfg, model, batch: int, seq: int) -> set:
    """TrainingMemory's gradients, optimizer bytes (states and step counters) and trainable
    parameters of a text-only step (fp32, AdamW) equal ``text_only_step_states``' on
    ``model``, as do ``plan train``'s on one GPU; the parameter count is unchanged. Returns
    the parameters left idle."""
    measured, with_grad, idle = text_only_step_states(model, batch, seq)
    mem = TrainingMemory(cfg, Workload(batch=batch, seq=seq, text_only=True), "fp32", "adamw")
    assert mem.trainable_params == with_grad
    assert (mem.gradients, mem.optimizer_total) == (measured["grad"], measured["opt"])
    row = one_gpu_plan(cfg, batch, seq, "fp32").rows[0]
    assert (row.memory["gradients"], row.memory["optimizer"]) == (measured["grad"],
                                                                   measured["opt"])
    assert mem.n_params == txcalc.params(cfg).total == numel(model)
    return idle


@settings(max_examples=5, **REF)
@given(text=text_config(), data=st.data())
def test_text_only_step_gradients_and_optimizer_states_equal_memtracker(text, data):
    """A text-only training step (fp32, AdamW): HF's MllamaTextModel skips the cross-attention
    blocks, so torch leaves their parameters' .grad None and AdamW makes no state for them
    (torch/optim/adam.py, Adam._init_group: only ``if p.grad is not None`` gets a state;
    AdamW is Adam's subclass): TrainingMemory counts neither (``assert_text_only_states``
    on MllamaForCausalLM: every parameter of the cross blocks, and only those, left idle)."""
    cfg = from_hf_dict(text | {"model_type": "mllama_text_model"})
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(2, 8), label="seq")
    model = cpu_model(transformers.MllamaForCausalLM, transformers.MllamaTextConfig(**text))
    idle = assert_text_only_states(cfg, model, batch, seq)
    assert {int(n.split(".")[2]) for n in idle} == {
        i for i in cfg.cross_layers if i < text["num_hidden_layers"]}


@settings(max_examples=3, **REF)
@given(text=text_config(), vision=vision_config())
def test_text_only_step_leaves_the_vision_tower_without_gradients(text, vision):
    """MllamaForConditionalGeneration given no pixel_values runs neither its vision tower nor
    its projector (MllamaModel.forward: ``if pixel_values is not None``): they get no gradient
    or AdamW state either, and TrainingMemory counts none (``assert_text_only_states``)."""
    raw = {"model_type": "mllama", "text_config": text, "vision_config": vision}
    cfg = from_hf_dict(raw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.MllamaConfig(text_config=text, vision_config=vision)
    model = cpu_model(transformers.MllamaForConditionalGeneration, config)
    idle = assert_text_only_states(cfg, model, 2, 5)
    assert {n for n in idle if n.startswith(("model.vision_model.",
                                             "model.multi_modal_projector."))} == {
        n for n, _ in model.named_parameters()
        if n.startswith(("model.vision_model.", "model.multi_modal_projector."))}


def test_plan_train_text_only_times_the_self_attention_blocks_alone():
    """``plan train`` on Mllama (it takes no images): each cross-attention block runs for no
    time, and the blocks' compute time is that of a Llama model of the self-attention layers
    alone (HF LlamaConfig, same widths); the answer says the cross blocks do not run."""
    from typer.testing import CliRunner

    from txcalc.cli import app
    from txcalc.train.setting import group_times
    text = {"hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 3, "intermediate_size": 24, "vocab_size": 50,
            "cross_attention_layers": [1], "pad_token_id": 0, "bos_token_id": 0,
            "eos_token_id": 0}
    llama = {"model_type": "llama", "hidden_size": 16, "num_attention_heads": 4,
             "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 24,
             "vocab_size": 50, "tie_word_embeddings": False}

    def block_times(raw):
        s = one_gpu_plan(from_hf_dict(raw), 2, 7, "bf16-mixed").setting
        groups, of_block, _, _ = s.grouped
        return [group_times(s, groups[g], 1, False, 1, "none", 2) for g in of_block]
    mllama = block_times(text | {"model_type": "mllama_text_model"})
    assert mllama[1] == (0.0, 0.0, 0.0)
    assert [t for i, t in enumerate(mllama) if i != 1] == block_times(llama)
    out = json.loads(CliRunner().invoke(app, ["plan", "train", "llama-3.2-11b-vision",
                                              "--tokens", "1B", "--gpu", "h100",
                                              "--json"]).stdout)
    assert any("8 cross-attention blocks do not run" in a for a in out["assumed"])


def test_memory_without_images_saves_nothing_in_the_cross_blocks():
    """``txcalc memory llama-3.2-11b-vision`` (training, no --images): the 8 cross-attention
    blocks save nothing, so the activations are those of the step with --src-seq rows less
    the cross blocks' share; the weights stay; the parameters of the blocks, the vision tower
    and the projector (numel of HF's MllamaForConditionalGeneration on meta, from the Hub's
    config.json) get no gradient (bf16, 2 B), no AdamW states (2 x fp32), fp32 master or step
    counter (4 B a tensor); the answer says so, as ``fit`` (which takes no images) does."""
    from typer.testing import CliRunner

    from txcalc.cli import app
    def run(*a):
        return json.loads(CliRunner().invoke(app, ["memory", "llama-3.2-11b-vision", "--seq",
                                                   "256", *a, "--json"]).stdout)
    text, fed = run(), run("--src-seq", "256")
    cfg = txcalc.load("llama-3.2-11b-vision")
    per_layer = TrainingMemory(cfg, Workload(batch=1, seq=256, attn_impl="flash"),
                               "bf16-mixed").activations_by_layer()
    cross = sum(b for (_, layer), b in per_layer.items() if layer in cfg.cross_layers)
    assert text["activations_bytes"] == fed["activations_bytes"] - cross
    from pathlib import Path
    raw = json.loads((Path(__file__).parents[1] / "data/hf/llama-3.2-11b-vision.json")
                     .read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.MllamaConfig(text_config=raw["text_config"],
                                           vision_config=raw["vision_config"])
    model = hf(transformers.MllamaForConditionalGeneration, config).model
    blocks = [p for i in cfg.cross_layers for p in model.language_model.layers[i].parameters()]
    vision = [*model.vision_model.parameters(), *model.multi_modal_projector.parameters()]
    n = sum(p.numel() for p in blocks + vision)
    # step counters: one per tensor of the blocks; the engine holds the vision tower and the
    # projector as one parameter tensor (the params-only ``vision`` op), so one counter for
    # them, with or without images (HF's 511 tensors: 510 x 4 B more, a gap left as it is)
    tensors = len(blocks) + 1
    assert text["weights_bytes"] == fed["weights_bytes"]
    assert text["gradients_bytes"] == fed["gradients_bytes"] - 2 * n
    assert text["optimizer_bytes"] == fed["optimizer_bytes"] - (8 + 4) * n - 4 * tensors
    assert any("8 cross-attention blocks do not run" in a for a in text["assumed"])
    assert not any("cross-attention" in a for a in fed["assumed"])
    fit = json.loads(CliRunner().invoke(app, ["fit", "llama-3.2-11b-vision", "--gpu", "h200",
                                              "--finetune", "lora", "--json"]).stdout)
    assert any("8 cross-attention blocks do not run" in a for a in fit["assumed"])


def test_flops_without_images_skip_the_cross_blocks():
    """``txcalc flops llama-3.2-11b-vision`` (no --images): the 8 cross-attention blocks run
    nothing, and the answer says so; with --images they read the vision rows."""
    from typer.testing import CliRunner

    from txcalc.cli import app
    run = lambda *a: json.loads(CliRunner().invoke(app, ["flops", "llama-3.2-11b-vision",  # noqa: E731
                                                         "--seq", "100", *a, "--json"]).stdout)
    cfg = txcalc.load("llama-3.2-11b-vision")
    work = Workload(batch=1, seq=100, attn_impl="flash")
    want = count_flops(cfg, dataclasses.replace(work, text_only=True))
    out = run()
    assert out["forward_flops"] == want.forward < count_flops(cfg, work).forward
    assert any("cross-attention blocks do not run" in a for a in out["assumed"])
    assert run("--images", "1")["forward_flops"] > count_flops(cfg, work).forward


@st.composite
def engine_configs(draw):
    text = draw(text_config())
    return from_hf_dict(text | {"model_type": "mllama_text_model"})


def saved_per_layer(cfg, work, dtype):
    model = build(cfg, dtype, "meta", attn_impl=work.attn_impl, recompute=work.recompute,
                  softmax_fp32=work.softmax_fp32)
    measured, _ = saved_by_module(model, make_inputs(model, work.batch, work.seq, work.src_seq))
    precision = "fp32" if dtype == torch.float32 else "bf16-mixed"
    return TrainingMemory(cfg, work, precision).activations_by_layer(), by_layer(measured)


@settings(max_examples=12, **REF)
@given(cfg=engine_configs(), data=st.data(), fp32=st.booleans())
def test_reference_gated_cross_blocks_params_flops_saved_bytes_exact(cfg, data, fp32):
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(2, 10), label="seq")
    src = data.draw(st.integers(1, 12), label="vision rows")
    work = Workload(batch=batch, seq=seq, src_seq=src)
    model = build(cfg, torch.bfloat16, "meta")
    names = {n for n, _ in model.named_modules()}
    for i in cfg.cross_layers:  # the new structure under the engine's op paths
        assert {f"layers.{i}.cross_attn.q_norm", f"layers.{i}.cross_attn.k_norm",
                f"layers.{i}.attn_gate", f"layers.{i}.mlp_gate"} <= names
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
    _, fwd, bwd = flops_by_module(model, make_inputs(model, batch, seq, src))
    f = count_flops(cfg, work)
    assert (fwd, bwd) == (f.forward, f.backward)
    dtype = torch.float32 if fp32 else torch.bfloat16
    for recompute in ("none", "selective", "full"):
        predicted, measured = saved_per_layer(
            cfg, dataclasses.replace(work, recompute=recompute), dtype)
        assert predicted == measured, recompute


@settings(max_examples=6, **REF)
@given(cfg=engine_configs(), data=st.data())
def test_reference_kv_cache_after_generate_holds_the_vision_keys(cfg, data):
    batch = data.draw(st.integers(1, 2), label="batch")
    prompt = data.draw(st.integers(1, 6), label="prompt")
    new = data.draw(st.integers(1, 3), label="new tokens")
    src = data.draw(st.integers(1, 9), label="vision rows")
    model = build(cfg, torch.float32, "cpu")
    nbytes, context = kv_cache_after_generate(model, batch, prompt, new, src)
    assert nbytes == kv_cache_bytes(cfg, context, batch, "fp32", src_seq=src)


def test_llama_3_2_11b_vision_preset_reproduces_its_published_count():
    """Published: 10,670,220,835 parameters, the Hub's safetensors metadata of
    meta-llama/Llama-3.2-11B-Vision-Instruct (``HfApi().get_safetensors_metadata(...)
    .parameter_count``, recorded in github.com/floschne/gimmick,
    src/gimmick/utils/__init__.py, ``get_model_sizes``: "meta-llama/llama-3.2-11b-vision-instruct":
    10670220835); Meta's model card: "Llama 3.2-Vision 11B (10.6B)" (truncated: 0.7% below).
    A test row: nothing was fitted to it. The preset equals its config.json import and the HF
    model on meta (tests/conformance/test_presets.py)."""
    counts = txcalc.params("llama-3.2-11b-vision")
    assert counts.total == 10_670_220_835
    assert 0 <= (counts.total - 10.6e9) / 10.6e9 < 0.007
    cfg = txcalc.load("llama-3.2-11b-vision")
    # one 560-px image: 4 tiles x (40^2 patches + class token) rows for the cross layers
    assert cfg.image_states == 6404 and cfg.image_seq_tokens(1) == 1


def test_images_on_the_cli_feed_the_cross_layers():
    """``txcalc flops llama-3.2-11b-vision --images 2``: two <|image|> tokens join the prompt
    and the cross-attention layers read two images' vision states (2 x 6404 rows)."""
    from typer.testing import CliRunner

    from txcalc.cli import app
    r = CliRunner().invoke(app, ["flops", "llama-3.2-11b-vision", "--seq", "100", "--images",
                                 "2", "--json"])
    out = json.loads(r.stdout)
    cfg = txcalc.load("llama-3.2-11b-vision")
    want = count_flops(cfg, Workload(batch=1, seq=102, src_seq=2 * 6404, attn_impl="flash"))
    assert (out["forward_flops"], out["image_tokens"]) == (want.forward, 2)


def test_serving_memory_holds_the_vision_keys_of_the_images():
    """``txcalc memory llama-3.2-11b-vision --inference --images 1``: the 8 cross layers keep
    the keys and values of one image's 6404 vision rows, the 32 self-attention layers those of
    the context (plus the <|image|> token); a text-only request keeps no cross cache (HF skips
    the cross layers without images)."""
    from typer.testing import CliRunner

    from txcalc.cli import app
    run = lambda *a: json.loads(CliRunner().invoke(app, ["memory", "llama-3.2-11b-vision",  # noqa: E731
                                                         "--inference", *a, "--json"]).stdout)
    cfg = txcalc.load("llama-3.2-11b-vision")
    per_row = 2 * cfg.kv_dim * 2  # bf16 keys and values
    with_image = run("--context", "1000", "--images", "1")
    assert with_image["kv_cache_bytes"] == per_row * (32 * 1001 + 8 * 6404)
    assert run("--context", "1000")["kv_cache_bytes"] == per_row * 32 * 1000


@settings(max_examples=5, **REF)
@given(cfg=engine_configs(), data=st.data())
def test_reference_fused_sdpa_saved_bytes_under_fake_tensors(cfg, data):
    """The flash kernel on the cross layers (no mask: the fused path) and the causal ones."""
    from reference.measure import saved_under_fake
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(2, 10), label="seq")
    src = data.draw(st.integers(1, 12), label="vision rows")
    work = Workload(batch=batch, seq=seq, src_seq=src, attn_impl="flash")
    measured, _ = saved_under_fake(cfg, work, torch.bfloat16)
    assert TrainingMemory(cfg, work, "bf16-mixed").activations_by_layer() == by_layer(measured)


def test_training_memory_with_images_reads_their_vision_rows():
    """``txcalc memory llama-3.2-11b-vision --images 1`` (training): the cross layers read
    one image's 6404 vision rows, as ``txcalc flops --images 1`` counts them."""
    from typer.testing import CliRunner

    from txcalc.cli import app
    out = json.loads(CliRunner().invoke(app, ["memory", "llama-3.2-11b-vision", "--seq", "64",
                                              "--images", "1", "--json"]).stdout)
    cfg = txcalc.load("llama-3.2-11b-vision")
    want = TrainingMemory(cfg, Workload(batch=1, seq=65, src_seq=6404, attn_impl="flash"),
                          "bf16-mixed").to_json()
    assert out["activations_bytes"] == want["activations_bytes"]
