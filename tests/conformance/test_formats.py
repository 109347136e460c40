"""Weight formats (txcalc/engine/formats.py) against real files.

1. Our reference packer (reference/quant_pack.py) quantises a small random model for each
   format; safetensors writes it; the file's header lists every tensor (name, dtype, shape,
   byte range). ``checkpoint_tensors`` must name the same tensors with the same dtypes and
   shapes, and ``checkpoint_bytes`` must equal the file's data bytes exactly (bitsandbytes'
   JSON quant state: within the few characters of its float offset, module doc of formats).
2. gguf's own writer (``pip install gguf``) writes a GGUF file with the tensor types our
   recipes assign; its reader's byte counts must equal ours: the block layouts of gguf-py's
   GGML_QUANT_SIZES against our GGUF_BLOCKS.
3. compressed-tensors (the library llm-compressor writes checkpoints with) quantises and
   compresses the reference model on CPU for its int4 pack-quantized, int8 and fp8 formats;
   the file's tensors must equal ours.
4. Published checkpoints: total bytes of real quantised releases, each with its source, within
   0.5 %.
"""

import dataclasses
import json
import struct

import pytest

from txcalc import load
from txcalc.engine.components import model_ops_tuple
from txcalc.model.config import ModelConfig
from txcalc.engine.formats import (FormatError, checkpoint_bytes, checkpoint_tensors,
                                   model_checkpoint_bytes, scheme, scheme_from_quant_config)

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
from reference.model import build  # noqa: E402
from reference.quant_pack import quantise_model  # noqa: E402

ST_DTYPE = {"F32": "f32", "F16": "f16", "BF16": "bf16", "F8_E4M3": "f8", "I64": "i64",
            "I32": "i32", "I8": "i8", "U8": "u8"}


def tiny(**kw) -> ModelConfig:
    base = dict(name="tiny", family="decoder", n_layers=2, d_model=256, n_heads=4,
                n_kv_heads=2, d_ff=512, vocab_size=384, max_position=64, qkv_bias=True,
                activation="swiglu")
    return ModelConfig(**(base | kw))


def tiny_moe() -> ModelConfig:
    return tiny(n_experts=4, top_k=2, moe_d_ff=256, qkv_bias=False)


def file_tensors(path):
    """{name: (dtype, shape, bytes)} from a safetensors header, and the data region size."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {k: (ST_DTYPE[v["dtype"]], tuple(v["shape"]), v["data_offsets"][1] - v["data_offsets"][0])
           for k, v in header.items()}
    return out, len(raw) - 8 - n


CASES = [  # (scheme name, packer method, packer kwargs, model, checkpoint dtype)
    ("int4-g128", "gptq", dict(bits=4, group=128), tiny, torch.float16),
    ("gptq-int3-g128", "gptq", dict(bits=3, group=128), tiny, torch.float16),
    ("gptq-int2-g64", "gptq", dict(bits=2, group=64), tiny, torch.float16),
    ("gptq-int8-g-1", "gptq", dict(bits=8, group=-1), tiny, torch.float16),
    ("awq-int4-g128", "awq", dict(group=128), tiny, torch.float16),
    ("ct-int4-g128", "ct", dict(bits=4, group=128), tiny, torch.bfloat16),
    ("int8", "int8", {}, tiny, torch.bfloat16),
    ("fp8", "fp8", dict(mode="tensor"), tiny, torch.bfloat16),
    ("fp8-dynamic", "fp8", dict(mode="dynamic"), tiny, torch.bfloat16),
    ("fp8-channel", "fp8", dict(mode="channel"), tiny, torch.bfloat16),
    ("fp8-block", "fp8", dict(mode="block"), tiny_moe, torch.bfloat16),
    ("nf4", "nf4", dict(double_quant=True), tiny, torch.bfloat16),
    ("nf4-nodq", "nf4", dict(double_quant=False), tiny, torch.bfloat16),
    ("fp4", "fp4", dict(double_quant=True), tiny, torch.bfloat16),
    ("mxfp4", "mxfp4", {}, tiny_moe, torch.bfloat16),
    ("nvfp4", "nvfp4", {}, tiny_moe, torch.bfloat16),
]


@pytest.mark.parametrize("name,method,kw,make,dtype", CASES, ids=[c[0] for c in CASES])
def test_checkpoint_bytes_equal_packed_file(tmp_path, name, method, kw, make, dtype):
    cfg = make()
    torch.manual_seed(0)
    model = build(cfg, torch.float32, "cpu")
    state = quantise_model(model, method, dtype, **kw)
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file(state, str(path))
    got, data_bytes = file_tensors(path)
    sch = dataclasses.replace(scheme(name), dense="f16" if dtype == torch.float16 else "bf16")
    want = {n: (dt, tuple(shape)) for n, dt, shape in checkpoint_tensors(model_ops_tuple(cfg),
                                                                          sch, cfg)}
    assert set(want) == set(got), (set(want) ^ set(got))
    for n, (dt, shape) in want.items():
        if "quant_state" in n:  # JSON with a float repr: length within a few characters
            assert dt == got[n][0] and abs(shape[-1] - got[n][1][-1]) <= 3, n
        else:
            assert (dt, shape) == got[n][:2], n
    predicted = checkpoint_bytes(model_ops_tuple(cfg), sch, cfg)
    states = sum(1 for n in want if "quant_state" in n)
    assert abs(predicted - data_bytes) <= 3 * states
    if not states:
        assert predicted == data_bytes


def test_tied_weights_counted_once(tmp_path):
    cfg = tiny(tie_embeddings=True)
    model = build(cfg, torch.float32, "cpu")
    state = quantise_model(model, "nf4", torch.bfloat16, double_quant=True)
    path = tmp_path / "m.safetensors"
    safetensors_torch.save_file(state, str(path))
    got, data = file_tensors(path)
    names = [n for n, _, _ in checkpoint_tensors(model_ops_tuple(cfg), scheme("nf4"), cfg)]
    assert set(names) == set(got) and "embed.tokens.weight" in got
    assert not any(n.startswith("lm_head") for n in names)


# --- GGUF: gguf-py's writer and reader ------------------------------------------------------------
gguf = pytest.importorskip("gguf")


@pytest.mark.parametrize("recipe", ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "IQ4_XS"])
def test_gguf_tensor_bytes_equal_gguf_writer(tmp_path, recipe):
    np = pytest.importorskip("numpy")
    cfg = tiny(n_layers=8, d_model=512, d_ff=1024, n_heads=8, n_kv_heads=2, qkv_bias=False)
    sch = scheme("gguf:" + recipe)
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    rng = np.random.default_rng(0)
    for n, dt, shape in checkpoint_tensors(model_ops_tuple(cfg), sch, cfg):
        if dt.startswith("gguf:"):
            qtype = gguf.GGMLQuantizationType[dt[5:]]
            if qtype in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
                data = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), qtype)
            else:  # gguf-py cannot quantise K-quants: the writer sizes raw blocks itself
                data = np.zeros(gguf.quant_shape_to_byte_shape(shape, qtype), dtype=np.uint8)
            w.add_tensor(n, data, raw_dtype=qtype)
        else:
            w.add_tensor(n, np.zeros(shape, dtype={"f32": np.float32, "f16": np.float16}[dt]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = gguf.GGUFReader(str(path))
    assert sum(int(t.n_bytes) for t in r.tensors) == checkpoint_bytes(
        model_ops_tuple(cfg), sch, cfg)


# --- published checkpoints ------------------------------------------------------------------------
def within(pred: int, published: float, tol: float = 0.005) -> bool:
    return abs(pred / published - 1) <= tol


def test_llama_31_8b_fp8():
    """neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8 (compressed-tensors, per-tensor fp8 weights
    and static input scales, lm_head kept): model-00001-of-00002.safetensors 5 GB +
    model-00002 4.08 GB = 9.08 GB,
    https://huggingface.co/neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8/tree/4d24bdfe60a152b4193362a9c379d19ebdacc627"""
    pred = model_checkpoint_bytes(load("llama-3-8b"), scheme("fp8"))
    assert within(pred, 9.08e9)


def test_llama_31_70b_awq_int4():
    """hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4 (AutoAWQ GEMM, 4 bits, group 128,
    fp16): shards 4.97 + 6 x 4.89 + 3.36 + 2.1 = 39.77 GB,
    https://huggingface.co/hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4/tree/6c1e2350ee194c7a6c65f5c2deb124e32d93216b
    (the last shards' sizes: https://huggingface.co/awilliamson/Meta-Llama-3.1-70B-Instruct-AWQ,
    a verified duplicate)"""
    sch = scheme_from_quant_config({"quant_method": "awq", "bits": 4, "group_size": 128,
                                    "version": "gemm", "zero_point": True})
    pred = model_checkpoint_bytes(load("llama-3.1-70b"), sch)
    assert within(pred, 4.97e9 + 6 * 4.89e9 + 3.36e9 + 2.1e9)


def test_llama_2_7b_gptq():
    """TheBloke/Llama-2-7B-GPTQ main branch (4 bits, group 128, act-order, fp16):
    model.safetensors 3.90 GB (README's provided-files table; 3.9 GB on the file page,
    https://huggingface.co/TheBloke/Llama-2-7B-GPTQ/blob/refs%2Fpr%2F10/model.safetensors)"""
    sch = scheme_from_quant_config({"quant_method": "gptq", "bits": 4, "group_size": 128,
                                    "desc_act": True})
    pred = model_checkpoint_bytes(load("llama-2-7b"), sch)
    assert within(pred, 3.90e9)


@pytest.mark.parametrize("double_quant,published", [(True, 4.65e9 + 1.05e9),
                                                    (False, 4.98e9 + 1.05e9)])
def test_llama_3_8b_bnb_nf4(double_quant, published):
    """bitsandbytes NF4 checkpoints of Llama 3(.1) 8B (every Linear but lm_head, bf16 elsewhere):
    with double quant, VoyagerYuan/Llama-3.1-8B-Instruct-BNB-NF4-BF16, shards 4.65 + 1.05 GB,
    https://huggingface.co/VoyagerYuan/Llama-3.1-8B-Instruct-BNB-NF4-BF16/tree/main; without
    (transformers' BitsAndBytesConfig default, fp32 absmax), AminBH/Llama-3-8B-BnB-4bits, 4.98 +
    1.05 GB, https://huggingface.co/AminBH/Llama-3-8B-BnB-4bits/tree/main. The two differ by
    the 3 bytes per 64 weights of the fp32 absmax, which the test tells apart."""
    qc = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
          "bnb_4bit_use_double_quant": double_quant, "bnb_4bit_compute_dtype": "bfloat16"}
    pred = model_checkpoint_bytes(load("llama-3-8b"), scheme_from_quant_config(qc))
    assert within(pred, published)


@pytest.mark.parametrize("recipe,published", [("Q4_K_M", 4.92e9), ("Q5_K_M", 5.73e9)])
def test_llama_31_8b_gguf(recipe, published):
    """unsloth GGUF exports of Llama 3.1 8B: unsloth.Q4_K_M.gguf 4.92 GB, unsloth.Q5_K_M.gguf
    5.73 GB, https://huggingface.co/kbang2021/unsloth-Meta-Llama-3.1-8B-Instruct-bnb-4bit/tree/56fdecaca4b9caf1bca949d060cf8f3201a2a79a
    (the 128,256-token vocabulary adds a few MB of metadata)."""
    pred = model_checkpoint_bytes(load("llama-3-8b"), scheme("gguf:" + recipe))
    assert within(pred, published)


def test_deepseek_v3_fp8_block():
    """deepseek-ai/DeepSeek-V3 (fp8 e4m3 weights, 128 x 128 fp32 block scales, bf16 embeddings,
    head, norms and router; one multi-token-prediction module stored as layer 61, its copies of
    the token table and head in bf16): the 163
    weight files hold 688,586,727,753 bytes, https://huggingface.co/deepseek-ai/DeepSeek-V3
    (total as listed for revision afb92e1fa402c2be2a9eb085312bb02e0384d6c7)"""
    sch = scheme_from_quant_config({"quant_method": "fp8", "fmt": "e4m3",
                                    "activation_scheme": "dynamic",
                                    "weight_block_size": [128, 128]})
    pred = model_checkpoint_bytes(load("deepseek-v3"), sch, mtp_layers=1)
    assert within(pred, 688_586_727_753)


def test_the_deepseek_v3_preset_counts_its_stored_mtp_layer(capsys):
    """The preset's checkpoint (what `txcalc params deepseek-v3` states) is the published files'
    688,586,727,753 bytes (test_deepseek_v3_fp8_block's source) with the multi-token-
    prediction module the checkpoint stores (config.json num_nextn_predict_layers 1): without
    it the answer was 2.2 % under."""
    from txcalc.cli import main
    assert main(["params", "deepseek-v3", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["weights"] == "fp8-block"
    assert abs(got["checkpoint_bytes"] / 688_586_727_753 - 1) < 0.001
    cfg = load("deepseek-v3")
    assert got["checkpoint_bytes"] == model_checkpoint_bytes(cfg, scheme("fp8-block"), 1) > \
        model_checkpoint_bytes(cfg, scheme("fp8-block"), 0) * 1.02


@pytest.mark.parametrize("recipe,published", [("Q4_K_M", 4.08e9), ("Q5_K_M", 4.78e9),
                                              ("Q4_0", 3.83e9)])
def test_llama_2_7b_gguf(recipe, published):
    """TheBloke/Llama-2-7B-GGUF (llama.cpp commit bd33e5a): llama-2-7b.Q4_K_M.gguf 4.08 GB,
    llama-2-7b.Q4_0.gguf 3.83 GB,
    https://huggingface.co/TheBloke/Llama-2-7B-GGUF/tree/4407fb24384711513820563c90dc113e30fc682e;
    Q5_K_M 4.78 GB from the same-shaped LLaMA-7B release,
    https://huggingface.co/TheBloke/LLaMA-7b-GGUF/tree/main. A GGUF file adds its metadata (the
    32,000-token vocabulary, under 1 MB) to the tensors."""
    pred = model_checkpoint_bytes(load("llama-2-7b"), scheme("gguf:" + recipe))
    assert within(pred, published)


@pytest.mark.parametrize("model,total_size", [("gpt-oss-120b", 65_248_815_744),
                                              ("gpt-oss-20b", 13_761_264_768)])
def test_gpt_oss_mxfp4(model, total_size):
    """openai/gpt-oss-120b and -20b ship MXFP4 routed experts (blocks + e8m0 scales), bf16
    attention (with sinks and biases), router, embeddings and head; their
    model.safetensors.index.json metadata total_size: 65,248,815,744 bytes
    (https://huggingface.co/openai/gpt-oss-120b/blob/main/model.safetensors.index.json; the
    same figure is the tensor payload of its 15 shards, 65,248,893,184 bytes with their
    headers, in public inventories of that release) and 13,761,264,768 bytes
    (https://huggingface.co/openai/gpt-oss-20b/blob/main/model.safetensors.index.json).
    Read through the config's quantization_config and through --weights mxfp4 alike."""
    sch = scheme_from_quant_config({"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
        "lm_head"]})
    pred = model_checkpoint_bytes(load(model), sch)
    assert within(pred, total_size)
    assert pred == total_size  # to the byte: every stored tensor is accounted for
    assert pred == model_checkpoint_bytes(load(model), scheme("mxfp4"))


def test_mxfp4_scheme_covers_experts_only():
    """gpt-oss ships MXFP4 experts (quantization_config modules_to_not_convert: self_attn,
    router, embed_tokens, lm_head). On another MoE preset (mixtral) the scheme changes only
    the routed experts, at 4.25 bits per weight (gpt-oss itself: test_gpt_oss_mxfp4)."""
    cfg = load("mixtral-8x7b")
    ops = model_ops_tuple(cfg)
    sch = scheme_from_quant_config({"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
        "lm_head"]})
    expert = sum(op.params_total for op in ops if op.instances > 1)
    assert checkpoint_bytes(ops, None) - checkpoint_bytes(ops, sch) == expert * 2 - expert * 17 // 32


# --- quantization_config and names ---------------------------------------------------------------
def test_quant_config_bitsandbytes_keeps_lm_head():
    sch = scheme_from_quant_config({"quant_method": "bitsandbytes", "load_in_4bit": True,
                                    "bnb_4bit_quant_type": "nf4",
                                    "bnb_4bit_use_double_quant": True,
                                    "bnb_4bit_compute_dtype": "bfloat16"})
    assert sch.fmt.kind == "nf4" and sch.fmt.double_quant and "lm_head" in sch.keep


def test_quant_config_compressed_tensors_fp8():
    qc = {"quant_method": "compressed-tensors", "ignore": ["lm_head"], "config_groups": {
        "group_0": {"weights": {"type": "float", "num_bits": 8, "strategy": "tensor"},
                    "input_activations": {"type": "float", "num_bits": 8, "strategy": "tensor",
                                          "dynamic": False}}}}
    sch = scheme_from_quant_config(qc)
    assert sch.name == "fp8" and sch.fmt.input_scale


def test_keep_pattern_overrides_convention():
    cfg = load("llama-2-7b")
    ops = model_ops_tuple(cfg)
    all_q = checkpoint_bytes(ops, scheme("fp8"))
    kept = checkpoint_bytes(ops, scheme("fp8", keep=("layers.0.*",)))
    linears0 = [op for op in ops if op.layer == 0 and op.kind == "linear"]
    # kept: 2 bytes per weight instead of 1, and no bf16 weight and input scales (2 x 2 bytes)
    assert kept - all_q == sum(op.params_total for op in linears0) - 4 * len(linears0)


@pytest.mark.parametrize("bad", ["int5", "awq-int3-g128", "int4-g0", "gguf:Q9_K", "fp9", 7])
def test_unknown_formats_refused(bad):
    with pytest.raises(FormatError):
        scheme(bad)


def test_unknown_quant_method_refused():
    with pytest.raises(FormatError, match="quant_method 'hqq'"):
        scheme_from_quant_config({"quant_method": "hqq"})


# --- CLI and serving ------------------------------------------------------------------------------
def _cli(*args):
    from typer.testing import CliRunner

    from txcalc.cli import app
    return CliRunner().invoke(app, list(args))


def test_cli_params_reads_quantization_config(tmp_path):
    """A quantised checkpoint's config.json (unsloth/Meta-Llama-3.1-8B-bnb-4bit's fields) gives
    its checkpoint bytes without --weights; --weights overrides it; the bf16 default is the
    parameter count x 2."""
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "vocab_size": 128256, "max_position_embeddings": 131072,
           "tie_word_embeddings": False, "rope_theta": 500000.0,
           "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                   "bnb_4bit_quant_type": "nf4",
                                   "bnb_4bit_use_double_quant": True,
                                   "bnb_4bit_compute_dtype": "bfloat16"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = _cli("params", str(path), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["weights"] == "nf4"
    # nf4 with double quant: 0.5 + 1/64 + ... bytes per quantised weight, bf16 elsewhere
    assert out["checkpoint_bytes"] == model_checkpoint_bytes(load(str(path)),
                                                             scheme("nf4", keep=("lm_head",)))
    assert 5.6e9 < out["checkpoint_bytes"] < 5.8e9
    r = _cli("params", str(path), "--weights", "bf16", "--json")
    assert json.loads(r.output)["checkpoint_bytes"] == 2 * out["total_params"]


def test_a_loaded_config_keeps_its_files_quantization(tmp_path):
    """A name becomes a ModelConfig once, at the top: a config.json's quantization_config (a
    property of the file, not a field) still reaches the serving plan through the config
    txcalc.load returns (ModelConfig.loaded_from); the same fields built without the file
    serve in the precision's dtype."""
    import dataclasses

    from txcalc.engine.formats import resolve
    from txcalc.serve.infer import plan_infer
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "vocab_size": 128256, "max_position_embeddings": 131072,
           "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    loaded = load(str(path))
    assert loaded.loaded_from == str(path)
    want = resolve(str(path))[0].name  # what the path itself gives
    assert want == "fp8-channel" and plan_infer(loaded, "h100", 4096, 1).weights == want
    assert plan_infer(dataclasses.replace(loaded, loaded_from=""), "h100", 4096,
                      1).weights == "bf16"


def test_cli_bad_weights_exit_2(capsys):
    from txcalc.cli import main
    assert main(["params", "llama-2-7b", "--weights", "int5"]) == 2
    err = capsys.readouterr().err
    assert "unknown weight format 'int5'" in err and len(err.strip().splitlines()) == 1


def test_plan_infer_fp8_deepseek_on_eight_h200():
    """The issue's case: DeepSeek-V3 in bf16 needs 16 H200s; its fp8 checkpoint serves on 8
    (one H200 node, as deployed with SGLang/vLLM), and is the preset's default (its released
    format, issue 29)."""
    from txcalc.serve.infer import plan_infer
    assert plan_infer(load("deepseek-v3"), "h200", 8192, 16,
                      weights="bf16").best.total_gpus == 16
    assert plan_infer(load("deepseek-v3"), "h200", 8192, 16,
                      weights="fp8-block").best.total_gpus == 8
    assert plan_infer(load("deepseek-v3"), "h200", 8192, 16).best.total_gpus == 8


def test_plan_infer_int4_70b_on_two_4090():
    """A 70B model in 4-bit on two 24 GB RTX 4090s (bf16 needs 8); each GPU holds half the
    stored bytes."""
    from txcalc.serve.infer import plan_infer
    bf16 = plan_infer(load("llama-3.1-70b"), "rtx-4090", 4096, 1).best
    q = plan_infer(load("llama-3.1-70b"), "rtx-4090", 4096, 1, weights="awq-int4-g128").best
    assert bf16.total_gpus == 8 and q.total_gpus == 2
    stored = model_checkpoint_bytes(load("llama-3.1-70b"), scheme("awq-int4-g128"))
    assert abs(q.weights_bytes - stored / 2) < 0.01 * stored


def test_decode_reads_quantised_bytes_and_weight_only_knee():
    """Small-batch decode is bound by the bytes read: 4-bit weights decode faster than bf16;
    past the weight-only knee the dequantising kernel is compute-bound and slower than fp8."""
    from txcalc.serve.infer import plan_infer
    b1 = {w: plan_infer(load("llama-3-8b"), "h100", 2048, 1, weights=w).best.decode_tokens_per_s
          for w in ("bf16", "int4-g128", "fp8")}
    assert b1["int4-g128"] > b1["fp8"] > b1["bf16"]
    big = {w: plan_infer(load("llama-3-8b"), "h100", 256, 256, weights=w).best
           for w in ("int4-g128", "fp8")}
    per = {w: r.decode_tokens_per_s_per_seq for w, r in big.items()}
    assert per["fp8"] > per["int4-g128"]


def test_report_inference_with_weights(tmp_path, capsys):
    """`txcalc report --inference --weights`: the answer's bytes are the stored checkpoint plus
    the KV cache, and the plan serves it on two 24 GB GPUs."""
    from txcalc.cli import main
    from txcalc.engine.kvcache import kv_cache_bytes
    out = tmp_path / "rep"
    assert main(["report", "llama-3.1-70b", "--inference", "--gpu", "rtx-4090", "--context",
                 "4k", "--weights", "awq-int4-g128", "-o", str(out), "--json"]) == 0
    ans = json.loads(capsys.readouterr().out)["answer"]
    cfg = load("llama-3.1-70b")
    assert ans["total_bytes"] == model_checkpoint_bytes(cfg, scheme("awq-int4-g128")) + \
        kv_cache_bytes(cfg, 4096, 1, "bf16")
    assert ans["total_gpus"] == 2
    assert main(["report", "llama-3-8b", "--weights", "fp8", "-o", str(tmp_path / "x")]) == 2


# --- the real library: compressed-tensors (llm-compressor's checkpoint format) on CPU ------------
CT_CASES = [  # (our scheme, compressed-tensors format, weights args, input activations args)
    ("ct-int4-g128", "pack-quantized",
     dict(num_bits=4, type="int", strategy="group", group_size=128, symmetric=True), None),
    ("int8", "int-quantized", dict(num_bits=8, type="int", strategy="channel", symmetric=True),
     None),
    ("fp8", "float-quantized", dict(num_bits=8, type="float", strategy="tensor", symmetric=True),
     dict(num_bits=8, type="float", strategy="tensor", symmetric=True, dynamic=False)),
    ("fp8-dynamic", "float-quantized",
     dict(num_bits=8, type="float", strategy="tensor", symmetric=True),
     dict(num_bits=8, type="float", strategy="token", symmetric=True, dynamic=True)),
    ("fp8-channel", "float-quantized",
     dict(num_bits=8, type="float", strategy="channel", symmetric=True), None),
]


@pytest.mark.parametrize("name,fmt,weights,acts", CT_CASES, ids=[c[0] for c in CT_CASES])
def test_checkpoint_bytes_equal_compressed_tensors(tmp_path, name, fmt, weights, acts):
    """compressed-tensors (``pip install compressed-tensors``) quantises the reference model
    with a llm-compressor style config (every Linear but lm_head), compresses it, and
    safetensors writes the state dict; our tensors and bytes must match the file's."""
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
    cfg = tiny()
    torch.manual_seed(0)
    model = build(cfg, torch.bfloat16, "cpu")
    group = {"targets": ["Linear"], "weights": weights}
    if acts:
        group["input_activations"] = acts
    qc = QuantizationConfig.model_validate({"quant_method": "compressed-tensors", "format": fmt,
                                            "ignore": ["lm_head"],
                                            "config_groups": {"group_0": group}})
    apply_quantization_config(model, qc)
    for mod in model.modules():  # calibrated scales: absmax over each scale's span
        if hasattr(mod, "weight_scale"):
            w = mod.weight.detach().float()
            span = w.shape[1] // mod.weight_scale.shape[-1]
            s = w.view(w.shape[0], -1, span).abs().amax(-1)
            s = s.amax() if mod.weight_scale.numel() == 1 else s
            mod.weight_scale.data.copy_((s / 100).clamp(min=1e-6).reshape(
                mod.weight_scale.shape).to(mod.weight_scale.dtype))
    ModelCompressor.from_pretrained_model(model, quantization_format=fmt).compress_model(model)
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                                str(path))
    got, data_bytes = file_tensors(path)
    sch = scheme_from_quant_config({"quant_method": "compressed-tensors", "ignore": ["lm_head"],
                                    "config_groups": {"group_0": group}})
    assert sch.name == name
    want = {n: (dt, tuple(s)) for n, dt, s in checkpoint_tensors(model_ops_tuple(cfg), sch, cfg)}
    assert want == {n: v[:2] for n, v in got.items()}
    assert checkpoint_bytes(model_ops_tuple(cfg), sch, cfg) == data_bytes
