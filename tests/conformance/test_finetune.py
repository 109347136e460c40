"""Fine-tuning (txcalc/engine/finetune.py) against independent references:

- the reference model with LoRA / DoRA adapters and frozen parameters (reference/lora.py):
  trainable parameters, gradient bytes, FLOPs of a step (FlopCounterMode) and bytes saved for
  backward per layer (saved_tensors_hooks) over hypothesis-drawn configs x methods x targets x
  ranks x recompute modes; MemTracker by category on the CPU;
- PEFT's LoRA on the HF model (meta device): trainable count and FLOPs;
- bitsandbytes' Params4bit / Int8Params storage;
- published figures (QLoRA, LoRA and PEFT's README), each with its setup stated;
- bad combinations: one line, exit 2.
"""

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from txcalc.engine.accounting import count_flops
from txcalc.engine.components import model_ops
from txcalc.errors import TxcalcError
from txcalc.engine.finetune import (ADAPTABLE, Finetune, _adaptable, _name, apply_finetune,
                                    quantized_weight_bytes)
from txcalc.engine.memory import TrainingMemory
from txcalc.engine.workload import Workload

from ..ref_configs import configs

torch = pytest.importorskip("torch")
from reference.lora import finetune  # noqa: E402
from reference.measure import (by_layer, flops_and_saved_by_module,  # noqa: E402
                               make_inputs, saved_by_module)
from reference.model import build  # noqa: E402

SETTINGS = dict(derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def methods(draw, cfg):
    """A fine-tuning method valid for ``cfg``: mode, targets (a group or module names present),
    a rank up to the narrowest target, LoRA dropout; freeze: a trainable set."""
    mode = draw(st.sampled_from(["lora", "lora", "qlora", "dora", "freeze"]))
    if mode == "freeze":
        depth = cfg.stacks[-1][1]
        parts = draw(st.sets(st.sampled_from([f"last:{n}" for n in range(1, depth + 1)]
                                             + ["head", "norms", "embeddings"]), min_size=1))
        return Finetune("freeze", trainable=",".join(sorted(parts)))
    ops = [op for op in model_ops(cfg) if _adaptable(op)]
    names = sorted({_name(op) for op in ops}, key=ADAPTABLE.index)
    groups = [g for g in ("all-linear", "attn", "mlp")
              if any((g == "all-linear" and _name(op) != "lm_head") or
                     (g == "attn" and op.component.partition(".")[0] in ("attn", "cross_attn"))
                     or (g == "mlp" and (op.component.startswith("mlp.") or
                                         op.component.startswith("moe.shared.")))
                     for op in ops)]
    if draw(st.booleans()) and groups:
        targets = draw(st.sampled_from(groups))
    else:
        targets = ",".join(draw(st.sets(st.sampled_from(names), min_size=1, max_size=3)))
    chosen = [op for op in apply_finetune(cfg, model_ops(cfg), Finetune("lora", 1,
                                                                         targets=targets))
              if op.path.endswith(".lora_A")]
    width = min(min(op.d_in, op.d_out) for op in model_ops(cfg)
                if any(c.path == op.path + ".lora_A" for c in chosen))
    rank = draw(st.integers(1, min(width, 6)))
    return Finetune(mode, rank=rank, alpha=2.0 * rank, targets=targets,
                    lora_dropout=draw(st.sampled_from([0.0, 0.0, 0.1])))


def lengths(data, cfg):
    batch = data.draw(st.integers(1, 2), label="batch")
    seq = data.draw(st.integers(2, 10), label="seq")
    src = data.draw(st.integers(2, 10), label="src_seq") if cfg.family == "encoder-decoder" else 0
    return batch, seq, src


def nonzero(per_layer: dict) -> dict:
    """Layers that save something (a frozen embedding stage saves nothing: no measured row)."""
    return {k: v for k, v in per_layer.items() if v}


def reference(cfg, ft, recompute="none", dtype=None):
    model = build(cfg, dtype or torch.bfloat16, "meta", recompute=recompute)
    return finetune(model, ft)


@settings(max_examples=120, **SETTINGS)
@given(cfg=configs(), data=st.data())
def test_trainable_flops_and_saved_bytes_exact_against_the_reference(cfg, data):
    ft = data.draw(methods(cfg), label="method")
    batch, seq, src = lengths(data, cfg)
    work = Workload(batch=batch, seq=seq, src_seq=src, dropout_mask="act")
    model = reference(cfg, ft)
    mem = TrainingMemory(cfg, work, "bf16-mixed", "adamw", ft)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) == mem.trainable_params
    assert sum(p.numel() for p in model.parameters()) == mem.n_params
    # gradients: one bf16 gradient per trainable parameter, none for frozen ones
    inputs = make_inputs(model, batch, seq, src)
    # one forward for the FLOPs and the bytes saved without recompute
    _, fwd, bwd, saved = flops_and_saved_by_module(model, inputs)
    assert all((p.grad is not None) == p.requires_grad for p in model.parameters())
    assert sum(p.grad.untyped_storage().nbytes() for p in trainable) == mem.gradients
    f = count_flops(cfg, work, ft)
    assert (fwd, bwd) == (f.forward, f.backward)
    for recompute in ("none", "selective", "full"):
        w = dataclasses.replace(work, recompute=recompute)
        if recompute == "none":
            measured = saved
        else:
            model = reference(cfg, ft, recompute)
            measured, _ = saved_by_module(model, make_inputs(model, batch, seq, src))
        predicted = TrainingMemory(cfg, w, "bf16-mixed", "adamw", ft).activations_by_layer()
        assert nonzero(predicted) == by_layer(measured), recompute


# --- PEFT's LoRA on the HF model (meta device) --------------------------------------------------
PEFT_TARGETS = [["q_proj", "v_proj"], ["q_proj", "k_proj", "v_proj", "o_proj"],
                ["gate_proj", "up_proj", "down_proj"], "all-linear"]


@pytest.mark.parametrize("targets", PEFT_TARGETS, ids=str)
@pytest.mark.parametrize("rank", [1, 8])
def test_peft_lora_on_the_hf_model_gives_the_same_trainable_count_and_flops(targets, rank):
    """peft.get_peft_model(LoraConfig(r, target_modules)) on LlamaForCausalLM (meta, eager,
    input gradients on as for gradient checkpointing): trainable parameters and the FLOPs of
    forward + loss + backward (FlopCounterMode) equal the engine's for the same config.json."""
    peft = pytest.importorskip("peft")
    import json

    import txcalc
    from torch.utils.flop_counter import FlopCounterMode

    from ..hf_models import hf_model

    raw = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
           "vocab_size": 100, "max_position_embeddings": 128, "tie_word_embeddings": False}
    model = hf_model(raw)
    model.enable_input_require_grads()
    model = peft.get_peft_model(model, peft.LoraConfig(r=rank, lora_alpha=2 * rank,
                                                       target_modules=targets,
                                                       lora_dropout=0.0))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    batch, seq = 2, 16
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as fwd:
        loss = model(input_ids=ids, labels=ids).loss
    with FlopCounterMode(display=False) as bwd:
        loss.backward()

    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/config.json"
        with open(path, "w") as f:
            json.dump(raw | {"architectures": ["LlamaForCausalLM"]}, f)
        cfg = txcalc.load(path)
    ft = Finetune("lora", rank, targets=targets if isinstance(targets, str) else
                  ",".join(targets))
    work = Workload(batch=batch, seq=seq)
    assert trainable == TrainingMemory(cfg, work, finetune=ft).trainable_params
    f = count_flops(cfg, work, ft)
    assert (fwd.get_total_flops(), bwd.get_total_flops()) == (f.forward, f.backward)


# --- bitsandbytes storage -----------------------------------------------------------------------
SHAPES = [(100, 70), (4096, 4096), (11008, 4096), (3, 5), (128, 200), (1, 64 * 256 + 1)]


def _bytes(*tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors if t is not None)


@pytest.mark.parametrize("d_out,d_in", SHAPES)
@pytest.mark.parametrize("fmt,dq", [("nf4", True), ("nf4", False), ("fp4", True), ("fp4", False)])
def test_4bit_bytes_equal_bitsandbytes_params4bit(d_out, d_in, fmt, dq):
    """Real Params4bit tensors quantised on the CPU (bitsandbytes >= 0.45 runs 4-bit on CPU):
    packed codes, absmax, code book, and with double quantisation the nested absmax, nested
    code book and offset."""
    bnb = pytest.importorskip("bitsandbytes")
    w = torch.randn(d_out, d_in, dtype=torch.bfloat16)
    p = bnb.nn.Params4bit(w, requires_grad=False, quant_type=fmt, compress_statistics=dq,
                          blocksize=64)._quantize("cpu")
    qs = p.quant_state
    measured = _bytes(p.data, qs.absmax, qs.code)
    if dq:
        measured += _bytes(qs.offset, qs.state2.absmax, qs.state2.code)
    assert measured == quantized_weight_bytes(d_out, d_in, fmt, 64, dq)


@pytest.mark.parametrize("d_out,d_in", SHAPES[:4])
def test_int8_bytes_equal_bitsandbytes_int8params(d_out, d_in):
    bnb = pytest.importorskip("bitsandbytes")
    m = bnb.nn.Linear8bitLt(d_in, d_out, bias=False, has_fp16_weights=False)
    m.weight = bnb.nn.Int8Params(torch.randn(d_out, d_in, dtype=torch.float16),
                                 requires_grad=False, has_fp16_weights=False)
    m = m.to("cpu")
    assert _bytes(m.weight.data, m.weight.SCB) == quantized_weight_bytes(d_out, d_in, "int8")


def test_double_quantisation_saves_0_373_bits_per_parameter():
    """QLoRA (arXiv:2305.14314) section 3: double quantisation brings the constants from
    32/64 = 0.5 to 8/64 + 32/(64*256) = 0.127 bits per parameter, saving 0.373; here on a
    4096 x 4096 weight (the fixed code books are 0.0005 bits per parameter of it)."""
    n = 4096 * 4096
    with_dq = quantized_weight_bytes(4096, 4096, "nf4", 64, True) * 8 / n - 4
    without = quantized_weight_bytes(4096, 4096, "nf4", 64, False) * 8 / n - 4
    assert without - with_dq == pytest.approx(0.373, abs=0.001)
    assert with_dq == pytest.approx(0.127, abs=0.001)


# --- published figures ------------------------------------------------------------------------
def test_lora_paper_gpt3_175b_training_memory_and_checkpoint():
    """LoRA (Hu et al. 2021, arXiv:2106.09685) section 4.2: on GPT-3 175B "we reduce VRAM
    consumption during training from 1.2TB to 350GB" and with r=4 on q and v "the checkpoint
    size is reduced by roughly 10,000x (from 350GB to 35MB)". Setup: 16-bit weights, gradients
    and Adam states (bf16, 8 bytes per parameter) for full training, 16-bit frozen weights and
    r=4 adapters on q_proj, v_proj for LoRA; model states only (the paper's figures leave out
    activations). Full: 1.400e12 bytes = 1.27 TiB: the paper's "1.2TB" within 10 % read in
    binary units (1.4 TB decimal is 17 % over); LoRA: 350 GB decimal."""
    import txcalc
    cfg = txcalc.load("gpt3-175b")
    work = Workload(batch=1, seq=2048)
    full = TrainingMemory(cfg, work, "bf16", "adamw")
    lora = TrainingMemory(cfg, work, "bf16", "adamw", Finetune("lora", 4, targets="q_proj,v_proj"))
    states = lambda m: m.weights + m.gradients + m.optimizer_total  # noqa: E731
    assert states(full) / 2**40 == pytest.approx(1.2, rel=0.10)
    assert states(lora) / 1e9 == pytest.approx(350, rel=0.10)
    assert lora.adapter_bytes / 1e6 == pytest.approx(35, rel=0.10)  # 37.7 MB: +7.8 %
    assert states(full) / states(lora) > 3.9


def test_qlora_paper_lora_parameters_26_mb():
    """QLoRA section 2: for LLaMA 7B "with LoRA weights equivalent to commonly used 0.2 % of
    the original model weights ... the LoRA parameters take up only 26 MB" (16-bit). The paper
    gives no rank; r=5 on every linear layer is 0.185 % of LLaMA-7B's weights (llama-2-7b's
    shapes, the same as LLaMA-1 7B): 12.5 M parameters, 25.0 MB in bf16 (-3.8 %)."""
    import txcalc
    m = TrainingMemory(txcalc.load("llama-2-7b"), Workload(batch=1, seq=512), "bf16-mixed",
                       "adamw", Finetune("qlora", 5))
    assert m.trainable_params / m.n_params == pytest.approx(0.002, rel=0.10)
    assert m.adapter_bytes / 1e6 == pytest.approx(26, rel=0.10)


#: LLaMA-1 (huggyllama/llama-{7b,13b,30b,65b} config.json: V = 32,000, untied, MHA) with
#: Figure 6's bar for each: (name, d_model, layers, heads, d_ff, Figure 6 MB)
LLAMA1_FIGURE6 = [("7b", 4096, 32, 32, 11008, 5046), ("13b", 5120, 40, 40, 13824, 8476),
                  ("33b", 6656, 60, 52, 17920, 19302), ("65b", 8192, 80, 64, 22016, 37074)]


def _qlora_base_on_gpu(d, layers, heads, d_ff, name):
    """QLoRA's setup (artidoro/qlora, qlora.py at 7f4e95a; scripts/finetune_guanaco_7b.sh:
    --bits 4 --quant_type nf4 --double_quant --bf16): NF4 with double quantisation on every
    linear layer but lm_head (bitsandbytes' layout, byte for byte: test_nf4_storage_*), the
    embeddings, lm_head and norms in bf16. Returns (the base's tensor bytes, what the GPU holds
    for them under txcalc's one device rule, Overheads().device_bytes: the tensors, 5 %
    caching-allocator slack and a 1 GiB CUDA context with cuBLAS workspaces; the rule fit and
    the planner charge every GPU, with the defaults they have had since the planner's first
    commit, b48def5 of 2026-11-29; nothing here was calibrated on the QLoRA figures)."""
    from txcalc.model.hf import from_hf_dict
    from txcalc.parallel.overheads import Overheads
    cfg = from_hf_dict({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                        "hidden_size": d, "intermediate_size": d_ff, "num_hidden_layers": layers,
                        "num_attention_heads": heads, "num_key_value_heads": heads,
                        "vocab_size": 32000, "max_position_embeddings": 2048,
                        "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
                        "hidden_act": "silu", "torch_dtype": "float16"}, f"huggyllama/llama-{name}")
    m = TrainingMemory(cfg, Workload(batch=1, seq=512), "bf16-mixed", "adamw",
                       Finetune("qlora", 64, targets="all-linear"))
    base = m.weights - m.adapter_bytes
    return base, Overheads().device_bytes(base)


def test_qlora_paper_llama_7b_4bit_base_5048_mb():
    """QLoRA (arXiv:2305.14314v1) section 2, "Memory Requirement of Parameter-Efficient
    Finetuning": "For a 7B LLaMA model trained on FLAN v2 and a batch size of 1 [...] the 4-bit
    base model consumes 5,048 MB of memory." A test row (nothing calibrated on it).

    Setup stated: QLoRA's own (``_qlora_base_on_gpu``), read as what the GPU holds for the
    loaded base. The paper does not say how the figure was taken; Figure 6, whose 7B bar it
    is, sizes the models against GPUs ("some models do not quite fit on certain GPUs"), and
    the tensors alone do not reach it:

        reading                                          | MB     | vs 5,048
        -------------------------------------------------|--------|---------
        tensors: NF4 + DQ linears, bf16 tables           | 3,866  | -23.4 %
        on the GPU: Overheads().device_bytes (this test) | 5,133  |  +1.7 %
        (MiB: 5,048 MiB = 5,293 MB)                      |        |  -3.0 %

    The device rule's two terms are the planner's defaults, not fitted here; the four bars of
    Figure 6 (next test) agree with it within 2 %, where the tensors alone run 7-23 % under
    with a gap that grows with the model (1.2 to 2.6 GB), as a fixed context plus a share of
    the tensors would."""
    base, on_gpu = _qlora_base_on_gpu(4096, 32, 32, 11008, "7b")
    assert base / 1e6 == pytest.approx(3866, abs=1)  # the tensors: -23 %, not the figure
    assert on_gpu / 1e6 == pytest.approx(5048, rel=0.10)
    assert on_gpu / 1e6 == pytest.approx(5048, rel=0.02)  # measured: +1.7 %


@pytest.mark.parametrize("name,d,layers,heads,d_ff,mb", LLAMA1_FIGURE6)
def test_qlora_figure6_bars_on_the_gpu(name, d, layers, heads, d_ff, mb):
    """Figure 6 of QLoRA (the 4-bit base of each LLaMA size), as two GitHub threads transcribe
    its bars (artidoro/qlora#269 and bitsandbytes-foundation/bitsandbytes#790, 2023-09: "why
    are the memory usages for 7B, 13B, 33B, 65B equal to 5046M, 8476M, 19302M, 37074M"). Test
    rows, none calibrated on. QLoRA's setup on the GPU (``_qlora_base_on_gpu``):

        size | Figure 6 | tensors          | on the GPU
        -----|----------|------------------|----------------
        7B   |  5,046   |  3,866  (-23 %)  |  5,133  (+1.7 %)
        13B  |  8,476   |  7,202  (-15 %)  |  8,636  (+1.9 %)
        33B  | 19,302   | 17,415  (-10 %)  | 19,359  (+0.3 %)
        65B  | 37,074   | 34,460   (-7 %)  | 37,256  (+0.5 %)

    Other readings tried in earlier sessions, all tensors only: fp32 tables (-13 % .. -4 %)
    and NF4 without double quantisation with fp32 tables (-7 % .. +4 %), which is not QLoRA's
    setup."""
    base, on_gpu = _qlora_base_on_gpu(d, layers, heads, d_ff, name)
    assert base / 1e6 < 0.95 * mb  # the tensors alone fall short at every size
    assert on_gpu / 1e6 == pytest.approx(mb, rel=0.10)
    assert on_gpu / 1e6 == pytest.approx(mb, rel=0.02)


# --- bad combinations: one line, exit 2 ---------------------------------------------------------
@pytest.mark.parametrize("args,words", [
    (["--finetune", "lora", "--lora-rank", "5000"], ["--lora-rank (5000)", "q_proj"]),
    (["--finetune", "lora", "--lora-targets", "q_proj,foo_proj"], ["foo_proj"]),
    (["--finetune", "qlora", "--precision", "fp32"], ["qlora", "fp32"]),
    (["--finetune", "qlora", "--base-format", "fp32"], ["--base-format", "fp32"]),
    (["--finetune", "freeze", "--trainable", "last:99"], ["last:N", "99"]),
    (["--finetune", "freeze", "--trainable", "wings"], ["wings"]),
    (["--finetune", "sideways"], ["--finetune", "sideways"]),
    (["--offload", "disk"], ["--offload", "disk"]),
])
@pytest.mark.parametrize("command", ["memory", "fit"])
def test_bad_combinations_exit_2_with_one_line(capsys, command, args, words):
    from txcalc.cli import main
    gpu = ["--gpu", "rtx-4090"] if command == "fit" else []
    rc = main([command, "llama-2-7b", *gpu, *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "Traceback" not in err
    for w in words:
        assert w in err


def test_bad_finetune_values_in_the_library():
    import txcalc
    cfg = txcalc.load("llama-2-7b")
    with pytest.raises(TxcalcError, match="lora-rank"):
        TrainingMemory(cfg, Workload(), finetune=Finetune("lora", 4097))
    with pytest.raises(TxcalcError, match="16-bit"):
        TrainingMemory(cfg, Workload(), "fp32", finetune=Finetune("qlora"))
    with pytest.raises(TxcalcError, match="finetune"):
        TrainingMemory(cfg, Workload(), finetune="lora")


# --- txcalc fit ---------------------------------------------------------------------------------
def test_fit_llama_3_1_8b_qlora_on_rtx_4090_answers_in_one_bisection(capsys, monkeypatch):
    """The search and its answer: the largest seq fits and one more token does not.

    Issue 14's "answers in under 1 s" is measured in benchmarks/cli_speed.py (the whole
    command, wall and CPU time: 0.37 s wall on the 2-core dev machine, 2026-12-01), not here:
    a timed unit test fails on a loaded CI machine (1.52 s of CPU there once, when every probe
    rebuilt the fine-tuned ops). What is asserted is the work: one bisection over the lengths,
    at most log2(MAX_SEQ) + 2 memory evaluations, each reusing the fine-tuned ops built once
    (finetune.finetuned_ops)."""
    import json

    from txcalc.cli import main
    from txcalc.engine.finetune import finetuned_ops
    from txcalc.train.fit import Setup
    from txcalc.inputs import MAX_SEQ
    import txcalc
    calls = []
    need = Setup.need
    monkeypatch.setattr(Setup, "need", lambda self, b, s: calls.append((b, s)) or need(self, b, s))
    finetuned_ops.cache_clear()
    rc = main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--finetune", "qlora", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and 0 < len(calls) <= MAX_SEQ.bit_length() + 2
    built = finetuned_ops.cache_info()
    assert built.misses == 1 and built.hits >= len(calls) - 1
    assert set(out) >= {"fits", "max_seq", "max_batch", "total_bytes", "suggestions"}
    assert out["fits"] and out["max_batch"] == 1 and out["suggestions"] == []
    # fit's defaults when fine-tuning (issue 28): gradient checkpointing, the hf-peft recipe
    # (fp32 upcast, its optimizer kernel, its allocator slack), the GPU's cuBLAS workspace
    from txcalc.engine.recipes import get_recipe
    setup = Setup(txcalc.load("llama-3.1-8b"), recompute="full",
                  finetune=Finetune("qlora", upcast=True), optimizer_kernel="fused",
                  gpu_name="rtx-4090", fragmentation=get_recipe("hf-peft").reserved_slack)
    gpu = out["gpu_bytes"]
    assert setup.need(1, out["max_seq"]) == out["total_bytes"] <= gpu < setup.need(
        1, out["max_seq"] + 1)


def test_fit_suggests_changes_in_order_until_one_fits(capsys):
    import json

    from txcalc.cli import main
    # 32k tokens: with the fused linear cross-entropy tried second (no T x V logits), LoRA
    # alone fits at 4,096 (19.8 GB), so the list would stop before QLoRA
    rc = main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--seq", "32768", "--attn", "eager",
               "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and not out["fits"] and out["max_batch"] is None
    s = out["suggestions"]
    assert [x["fits"] for x in s] == [False] * (len(s) - 1) + [True]
    assert s[0]["change"].startswith("fused attention")
    assert all(a["total_bytes"] >= b["total_bytes"] for a, b in zip(s, s[1:]))
    # issue 28: QLoRA as the default recipe runs it (hf-peft: embeddings, norms, lm_head and so
    # the 32 checkpointed block inputs in fp32) adds bytes over LoRA at 32k tokens: skipped
    assert not any("QLoRA" in x["change"] for x in s)
    # offloading the checkpoints leaves the rerun block, with its MLP's activation gradients
    # (2 x 14,336 x 2 bytes a token: 1.75 GiB at 32k tokens), above the 4090: ZeRO-3 over two
    assert s[-2]["change"].startswith("offload recompute checkpoints")
    assert s[-1]["change"] == "2 GPUs (ZeRO-3)"


def test_fit_keeps_a_full_fine_tune_with_torchtunes_single_gpu_settings(capsys):
    """A full fine-tune of Llama 3.1 8B on a 24 GB card: torchtune's README runs it on one
    RTX 4090 (18.9 GiB; torchtune@30b8519e, its 8B_full_single_device config: dtype bf16,
    PagedAdamW8bit, optimizer_in_bwd, the finetune-validation fit row). fit's ladder reaches
    a fit with those settings, full fine-tuning kept (no adapters), and the last row's bytes
    are memory's need for the same options. At 32k tokens they cannot make it fit: they are
    not shown, and LoRA follows 8-bit Adam as before."""
    import json

    from txcalc.cli import main
    assert main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--seq", "2048", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["suggestions"]
    flags = [x["change"].split("(")[-1].rstrip(")") for x in s]
    assert flags[-3:] == ["--precision bf16", "--optimizer-in-backward",
                          "--optimizer paged-adam8bit"]
    assert s[-1]["fits"] and not any(x["fits"] for x in s[:-1])
    assert not any("LoRA" in x["change"] for x in s)
    assert main(["memory", "llama-3.1-8b", "--gpu", "rtx-4090", "--seq", "2048", "--recompute",
                 "full", "--loss", "fused-linear", "--precision", "bf16", "--optimizer",
                 "paged-adam8bit", "--optimizer-in-backward", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert s[-1]["total_bytes"] == mem["need_bytes"] <= mem["gpu_bytes"]
    assert main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--seq", "32768", "--json"]) == 0
    long = [x["change"] for x in json.loads(capsys.readouterr().out)["suggestions"]]
    assert not any("--precision bf16" in c or "backward" in c or "paged" in c for c in long)
    assert long[long.index("8-bit Adam (--optimizer adam8bit)") + 1].startswith("LoRA")


def test_offload_moves_optimizer_and_master_to_the_host():
    import txcalc
    cfg = txcalc.load("llama-2-7b")
    work = Workload(batch=1, seq=1024, recompute="full", attn_impl="flash")
    gpu = TrainingMemory(cfg, work)
    off = TrainingMemory(cfg, work, offload="all")
    assert off.host_bytes == gpu.optimizer_total + 4 * gpu.trainable_params + \
        off.offloaded_activations
    assert off.offloaded_activations == 32 * 1024 * 4096 * 2  # block inputs, bf16
    assert off.pcie_bytes == gpu.trainable_params * 4 + 2 * off.offloaded_activations
    assert off.total < gpu.total - gpu.optimizer_total + gpu.optimizer_temporaries


@pytest.mark.parametrize("targets", [["q_proj", "v_proj"], "all-linear"], ids=str)
@pytest.mark.parametrize("rank", [1, 8])
def test_peft_dora_flops_and_trainable_count(targets, rank):
    """peft.get_peft_model(LoraConfig(use_dora=True)) on a tiny LlamaForCausalLM on the CPU
    (DoRA's init reads the weights): trainable parameters (adapters + magnitude vectors) and
    FlopCounterMode's forward and backward FLOPs equal the engine's. PEFT's forward forms
    B A as lora_B(lora_A(eye(d_in))): 2 r d_in (d_in + d_out) FLOPs per adapted Linear, no
    backward (the norm is detached)."""
    peft = pytest.importorskip("peft")
    import json
    import tempfile

    import transformers
    import txcalc
    from torch.utils.flop_counter import FlopCounterMode

    from ..hf_models import hf_config

    raw = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
           "vocab_size": 100, "max_position_embeddings": 128, "tie_word_embeddings": False}
    hc = hf_config(raw)
    hc._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hc)
    model.enable_input_require_grads()
    model = peft.get_peft_model(model, peft.LoraConfig(r=rank, lora_alpha=2 * rank,
                                                       target_modules=targets,
                                                       lora_dropout=0.0, use_dora=True))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    batch, seq = 2, 16
    ids = torch.zeros(batch, seq, dtype=torch.long)
    with FlopCounterMode(display=False) as fwd:
        loss = model(input_ids=ids, labels=ids).loss
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/config.json"
        with open(path, "w") as f:
            json.dump(raw | {"architectures": ["LlamaForCausalLM"]}, f)
        cfg = txcalc.load(path)
    ft = Finetune("dora", rank, targets=targets if isinstance(targets, str) else
                  ",".join(targets))
    work = Workload(batch=batch, seq=seq)
    assert trainable == TrainingMemory(cfg, work, finetune=ft).trainable_params
    f = count_flops(cfg, work, ft)
    assert (fwd.get_total_flops(), bwd.get_total_flops()) == (f.forward, f.backward)


# --- MemTracker by category on the CPU ----------------------------------------------------------
MT_CASES = [("llama", "bf16-mixed", "adamw", Finetune("lora", 4)),
            ("llama", "fp32", "adamw", Finetune("dora", 2, targets="q_proj,v_proj")),
            ("llama", "bf16-mixed", "sgd", Finetune("freeze", trainable="last:1,head")),
            ("llama", "bf16-mixed", "adamw",
             Finetune("freeze", trainable="last:1,head,embeddings")),
            ("gpt2", "fp32", "adamw", Finetune("lora", 3, targets="attn", lora_dropout=0.1)),
            ("gpt2", "fp32", "adamw", Finetune("freeze", trainable="embeddings,norms")),
            ("t5", "fp32", "adamw", Finetune("lora", 2, targets="q_proj,v_proj")),
            ("llama", "bf16", "adam", Finetune("qlora", 4, targets="mlp"))]


@pytest.mark.parametrize("name,precision,optimizer,ft", MT_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[3].mode}" for c in MT_CASES])
def test_memory_by_phase_and_category_against_memtracker(name, precision, optimizer, ft):
    """A real fine-tuning step on the CPU (reference/train.py + reference/lora.py): weights,
    gradients, optimizer states and fp32 masters exact by category after forward, backward
    and the step. Activations, batch and loss exact too; with a frozen table they include
    the embedding output made a leaf by enable_input_require_grads, its .grad and the token
    ids (TrainingMemory.frozen_table_inputs, also checked on the first step below), and in
    this second step MemTracker also keeps the previous step's leaf and its gradient (2 E a
    per token), which a plain training loop frees (test_memtracker_keeps_the_previous_steps_
    leaf). QLoRA's base is in the model dtype on the reference (its NF4 bytes are checked
    against bitsandbytes above): compared as LoRA."""
    from tests.conformance.test_memory_phases import SMALL

    from reference.train import memory_by_phase
    cfg = SMALL[name]
    work = Workload(batch=2, seq=16, src_seq=12 if cfg.family == "encoder-decoder" else 0,
                    dropout_mask="act")
    measured = memory_by_phase(cfg, work, precision, optimizer, finetune=ft)
    unquantised = dataclasses.replace(ft, mode="lora") if ft.mode == "qlora" else ft
    mem = TrainingMemory(cfg, work, precision, optimizer, unquantised)
    predicted = mem.phases()
    # a frozen table: MemTracker still holds step 1's leaf and its .grad during step 2
    # (test_memtracker_keeps_the_previous_steps_leaf: a plain loop frees them)
    held = 0 if mem._table_trains else 2 * mem.frozen_table_inputs[1]
    for phase in ("after_forward", "after_backward", "after_step"):
        m, p = measured[phase], predicted[phase]
        for cat in ("param", "grad", "opt", "master"):
            assert m.get(cat, 0) == p[cat], (phase, cat)
        assert m.get("act", 0) + m.get("temp", 0) == p["act"] + p["temp"] + held, phase


@pytest.mark.parametrize("name,precision,optimizer,ft", MT_CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[3].mode}" for c in MT_CASES])
def test_first_step_totals_against_memtracker_with_frozen_tables(name, precision, optimizer,
                                                                  ft):
    """The first step (optimizer state made inside it), every phase's total exact, frozen
    token tables included: PEFT's enable_input_require_grads makes the frozen lookup's output
    a leaf that the graph holds (E a per token) with the token ids the lookup no longer saves
    (8), from forward until the loss is freed, and the leaf's gradient after backward; not
    beside the saved tensors when block 0 saves that very tensor (HF's RMSNorm in fp32: its
    fp32 copy is the input). A frozen head leaves the hidden states alive at the loss.
    GPT-2 with only embeddings and norms training: its backward peak lies inside the blocks
    (19,712 bytes over the engine's two ends of backward, the same before this change)."""
    from tests.conformance.test_memory_phases import SMALL

    from reference.train import memory_by_phase
    cfg = SMALL[name]
    work = Workload(batch=2, seq=16, src_seq=12 if cfg.family == "encoder-decoder" else 0,
                    dropout_mask="act")
    measured = memory_by_phase(cfg, work, precision, optimizer, finetune=ft, steps=1)
    unquantised = dataclasses.replace(ft, mode="lora") if ft.mode == "qlora" else ft
    predicted = TrainingMemory(cfg, work, precision, optimizer, unquantised).phases(
        first_step=True)
    phases = ["after_forward", "peak_forward", "after_backward", "after_step", "peak_backward"]
    if name == "gpt2" and ft.mode == "freeze":
        phases.remove("peak_backward")
    for phase in phases:
        assert measured[phase]["total"] == predicted[phase]["total"], phase


def test_memtracker_keeps_the_previous_steps_leaf():
    """Why the steady-state comparison above adds 2 E a per token with a frozen table: after a
    whole step (forward, backward, optimizer step, zero_grad, the loss and batch deleted) a
    plain loop holds no leaf activation, while under MemTracker the frozen lookup's output
    made a leaf by enable_input_require_grads is still alive, with its .grad."""
    import contextlib
    import gc

    from torch.distributed._tools.mem_tracker import MemTracker

    from reference.train import Trainer, _NoHook
    from tests.conformance.test_memory_phases import SMALL

    def leaves(before=()):  # 3-D leaf tensors that require grad, not among ``before``
        gc.collect()
        return [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and
                o.requires_grad and o.is_leaf and o.dim() == 3 and id(o) not in before]

    for tracked in (False, True):
        model = finetune(build(SMALL["llama"], torch.bfloat16, "cpu", attn_impl="sdpa"),
                         Finetune("lora", 4))
        trainer = Trainer(model, "bf16-mixed", "adamw")
        ctx = contextlib.nullcontext()
        if tracked:
            ctx = MemTracker()
            for p in model.parameters():
                if not p.requires_grad:
                    ctx._param_to_grad_hook_handles[p] = (_NoHook(), _NoHook())
            ctx.track_external(model, trainer.optimizer)
        before = {id(o) for o in leaves()}  # other tests' tensors still alive
        with ctx:
            inputs = make_inputs(model, 2, 16, device="cpu")
            loss = trainer.forward_backward(inputs)
            trainer.step()
            trainer.zero_grad()
            del loss, inputs
            alive = [(tuple(o.shape), o.grad is not None) for o in leaves(before)]
            assert alive == ([((2, 16, SMALL["llama"].d_model), True)] if tracked else [])


@pytest.mark.parametrize("name,precision,ft", [
    ("llama", "bf16-mixed", Finetune("lora", 4)),
    ("llama", "bf16-mixed", Finetune("lora", 4, targets="q_proj,v_proj")),
    ("llama", "bf16-mixed", Finetune("freeze", trainable="last:1,head")),
    ("gpt2", "fp32", Finetune("lora", 2))])  # fp32: the CPU LayerNorm keeps bf16 statistics
def test_frozen_table_leaf_and_ids_are_alive_after_forward(name, precision, ft):
    """Without MemTracker: every tensor alive after a forward (gc, unique storages, model
    states left out) is the saved activations, the loss, the token ids and labels, and, with
    the table frozen, the lookup's output made a leaf: the engine's after-forward bytes
    (without the leaf and the ids, one 4 KB and one 256 B tensor short). Flash attention
    keeps its output even when a frozen o_proj does not (LoRA on q and v only; freeze)."""
    import gc

    from tests.conformance.test_memory_phases import SMALL
    cfg = SMALL[name]
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = finetune(build(cfg, dtype, "cpu", attn_impl="sdpa"), ft)
    x, labels, _ = make_inputs(model, 2, 16, device="cpu")
    gc.collect()  # what was alive before the forward (model states, other tests' tensors)
    state = {o.untyped_storage()._cdata for o in gc.get_objects()
             if isinstance(o, torch.Tensor) and o is not x and o is not labels}
    # identity hooks: the graph keeps each saved tensor as a Python object, visible to gc
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        loss = model(x, labels)
    gc.collect()
    live = {}
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor) and o.untyped_storage()._cdata not in state:
            live[o.untyped_storage()._cdata] = o.untyped_storage().nbytes()
    mem = TrainingMemory(cfg, Workload(batch=2, seq=16, attn_impl="flash"), precision,
                         "adamw", ft)
    ids, leaf = mem.frozen_table_inputs
    assert ids == 2 * 16 * 8 and leaf == 2 * 16 * cfg.d_model * dtype.itemsize
    assert sum(live.values()) == mem.phases()["after_forward"]["act"]
    del loss


T0_3B = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 2048,
         "d_ff": 5120, "d_kv": 64, "num_heads": 32, "num_layers": 24, "num_decoder_layers": 24,
         "vocab_size": 32128, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False,
         "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
         "dropout_rate": 0.1, "layer_norm_epsilon": 1e-06, "is_encoder_decoder": True}


def test_peft_readme_t0_3b_full_and_lora(tmp_path):
    """PEFT README: bigscience/T0_3B on one A100-80GB, full fine-tuning 47.14 GB GPU and
    PEFT-LoRA 14.4 GB GPU. Setup of its example (peft_lora_seq2seq_accelerate_ds_zero3_
    offload.py, twitter_complaints): fp32 AdamW, batch 8, inputs padded to 64 tokens, labels
    of 3, dropout 0.1, LoRA r=8 alpha=32 dropout 0.1 on T5's default q, v; eager attention.
    T0_3B's config.json (t5-v1_1-xl: 2.85 B parameters, untied head) is written out here.
    The README's tracker reports the peak minus the memory allocated when training begins;
    read that way full fine-tuning (the fp32 weights already loaded) is 45.60 GB (-3.3 %),
    read as the whole peak 57.0 GB (+21 %). LoRA is within 10 % read as the whole peak: 13.75
    GB (-4.5 %). The two figures need the two readings: stated, not hidden."""
    import json

    import txcalc
    path = tmp_path / "config.json"
    path.write_text(json.dumps(T0_3B))
    cfg = txcalc.load(path)
    assert txcalc.params(cfg).total == pytest.approx(3e9, rel=0.06)
    work = Workload(batch=8, seq=3, src_seq=64, attn_impl="eager", dropout=True)
    full = TrainingMemory(cfg, work, "fp32", "adamw")
    lora = TrainingMemory(cfg, work, "fp32", "adamw",
                          Finetune("lora", 8, 32, targets="q_proj,v_proj", lora_dropout=0.1))
    assert (full.total - full.weights) / 1e9 == pytest.approx(47.14, rel=0.10)
    assert lora.total / 1e9 == pytest.approx(14.4, rel=0.10)
    assert lora.trainable_params == 24 * 2 * 2 * 8 * (2048 + 2048) + 24 * 2 * 8 * (2048 * 2)


def test_memory_json_adds_trainable_adapter_and_host_bytes(capsys):
    """memory --json: trainable_params, adapter_bytes, host_bytes (and the rest of the
    fine-tuning figures) for the options given; LoRA r=8 on q, v of LLaMA-2-7B trains
    4,194,304 parameters, as PEFT prints for it."""
    import json

    from txcalc.cli import main
    rc = main(["memory", "llama-2-7b", "--finetune", "lora", "--lora-rank", "8",
               "--lora-targets", "q_proj,v_proj", "--offload", "optimizer", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["trainable_params"] == 4_194_304 == out["adapter_params"]
    assert out["adapter_bytes"] == 2 * 4_194_304
    # Adam states and fp32 master (12), fp32 gradients (4), a 4-byte step per A and B tensor
    assert out["host_bytes"] == 4_194_304 * (12 + 4) + 4 * 2 * 64
    assert out["gradients_bytes"] == 2 * 4_194_304
    rc = main(["flops", "llama-2-7b", "--finetune", "qlora", "--seq", "128", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["dequant_bytes_per_step"] > 0 and "qlora" in out["finetune"]
