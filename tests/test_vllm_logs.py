"""KV capacity against more published vLLM logs (txcalc.serving.kv_capacity), one test per row,
each with its source and the quoted figures.

Which rows calibrate what: nothing in txcalc/serving.py is fitted to the rows below, and every
row here is a test row. The constants are vLLM's defaults (utilisation 0.9, block size 16,
max_num_seqs 256, the profiled step), the planner's framework terms (``Overheads``: 1 GiB CUDA
context + workspaces, 0.5 GiB NCCL buffers when TP x PP > 1), ``CUDA_VISIBLE_FRACTION`` and, for
engine "vllm-0.6" only, ``V064_CUDA_CONTEXT_BYTES`` (400 MiB, a PyTorch maintainer's figure for
a lazily loaded CUDA context). Where a row needs what CUDA reports as the GPU's total (a device
property, not a model constant: the RTX 3090 rows here and in tests/test_serving.py), the
figure is quoted from another log of the same GPU model and given to txcalc the way a user
gives it (``Gpu.usable_bytes`` through ``usable_given``, i.e. ``--gpu-gb``), its source beside
it; the one exception (the L40S row, an xfail) says so.
"""

from __future__ import annotations

import pytest

from txcalc.serving import kv_capacity

GiB = 2**30

# --- vLLM v0.4.1+ (commit 73c8d67) on one RTX A6000, five models --------------------------------
#: https://github.com/vllm-project/vllm/pull/4454 (mgoin, 2024-04-29, "[Misc] Upgrade to
#: torch==2.3.0"): "here are my results for kv cache block allocation using an A6000 ... Using
#: main's current HEAD commit 73c8d677e57e42374bcfb2271b8f1cf7f2c0a486:
#:   > python -c 'from vllm import LLM;LLM("meta-llama/Meta-Llama-3-8B-Instruct")'
#:   INFO 04-29 19:12:48 gpu_executor.py:118] # GPU blocks: 13248, # CPU blocks: 2048
#:   > python -c 'from vllm import LLM;LLM("teknium/OpenHermes-2.5-Mistral-7B")'
#:   INFO 04-29 19:13:07 gpu_executor.py:118] # GPU blocks: 12735, # CPU blocks: 2048
#:   > python -c 'from vllm import LLM;LLM("TheBloke/Llama-2-7B-GPTQ")'
#:   INFO 04-29 19:13:19 gpu_executor.py:118] # GPU blocks: 4877, # CPU blocks: 512
#:   > python -c 'from vllm import LLM;LLM("TheBloke/zephyr-7B-beta-AWQ")'
#:   INFO 04-29 19:13:37 gpu_executor.py:118] # GPU blocks: 17641, # CPU blocks: 2048"
#: and, before those, "> python -c 'from vllm import LLM;LLM("facebook/opt-125m")'
#:   INFO 04-29 19:12:30 gpu_executor.py:118] # GPU blocks: 75937, # CPU blocks: 7281"
#: Every engine argument is vLLM's default: utilisation 0.9, blocks of 16 tokens, max_num_seqs
#: 256, max_model_len = the config's max_position_embeddings (8,192 for Llama 3; 32,768 for the
#: two Mistral-7B fine-tunes, HF config.json of teknium/OpenHermes-2.5-Mistral-7B and
#: HuggingFaceH4/zephyr-7b-beta; 4,096 for Llama 2), no chunked prefill, so the profile runs
#: max(max_model_len, 2048) tokens. v0.4 sizes the cache from the memory in use after the profile
#: (PR #2031, #2863: init free - free after profile_run, caching-allocator reserve included):
#: engine "vllm-0.2". CUDA graphs are captured after the cache is sized. The RTX A6000's CUDA
#: total is the catalog's (48 GiB x 0.99 = 47.52 GiB). GPTQ / AWQ: TheBloke's main branches,
#: 4-bit, group 128 (their quantize_config.json / quant_config.json), fp16 activations.
#: facebook/opt-125m (no preset): its HF config.json, below (max_model_len 2,048, fp16).
OPT_125M = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 768,
            "ffn_dim": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
            "vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 768,
            "do_layer_norm_before": True, "activation_function": "relu",
            "enable_bias": True, "torch_dtype": "float16"}
A6000_PR4454 = [
    ("opt-125m", 2048, None, 75937),
    ("llama-3-8b", 8192, None, 13248),  # Meta-Llama-3-8B-Instruct
    ("mistral-7b", 32768, None, 12735),  # OpenHermes-2.5-Mistral-7B (32,002 tokens of vocab)
    ("llama-2-7b", 4096, "int4-g128", 4877),  # Llama-2-7B-GPTQ
    ("mistral-7b", 32768, "awq-int4-g128", 17641),  # zephyr-7B-beta-AWQ
]


@pytest.mark.parametrize("model,max_len,weights,blocks", A6000_PR4454)
def test_kv_blocks_rtx_a6000_vllm041_pr4454(model, max_len, weights, blocks):
    if model == "opt-125m":
        from txcalc.hf import from_hf_dict
        model = from_hf_dict(OPT_125M, "facebook/opt-125m")
    c = kv_capacity(model, "rtx-a6000", max_model_len=max_len, weights=weights,
                    engine="vllm-0.2")
    assert c.max_num_batched_tokens == max(max_len, 2048) and c.tp == 1
    assert c.held_allreduce_bytes == 0  # one GPU: no all-reduce
    assert abs(c.kv_blocks / blocks - 1) <= 0.03, (model, weights, c.kv_blocks, blocks)


# --- vLLM v0.6.4 on one RTX 3090: the profiled step past 32K ------------------------------------
def test_v0_profiles_a_512_token_step_past_32k_issue10517():
    """V0's rule past 32K (txcalc engine "vllm-0.6"): with max_model_len > 32,768 vLLM V0 turns
    chunked prefill on by default and profiles one 512-token step, not the whole length.

    Source: https://github.com/vllm-project/vllm/issues/10517, kaspersiminski's comment of
    2024-12-02 (RTX 3090, meta-llama/Llama-3.1-8B-Instruct, vLLM v0.6.4, utilisation 0.90):
    "35k - OK ... Loading model weights took 14.9888 GB / Memory profiling results:
    total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=15.05GiB". The
    rest of that log (its "# GPU blocks") is cut off in the stored copy of the comment, so
    this row tests the profiled step through the torch peak (weights + the step's activation
    peak), not kv_blocks. The peak separates the rules: 512 tokens +2.2 %, V1's 8,192
    +5.0 %, the whole 35,000 tokens (no chunking, v0.2) +23 %.

    What this row does not settle, left as it is: at 512 tokens txcalc's peak is the sampler
    over 256 rows of logits (SAMPLER_BYTES_PER_LOGIT = 14: 0.43 GiB), so txcalc gives the same
    peak for V0's later 2,048-token chunk (PR #10544, v0.6.5); the log's peak sits only 0.06 GiB
    above its weights (14.99 GiB), which is the fused-MLP group at 512 tokens (0.053 GiB) or
    the bf16 logits alone (256 x 128,256 x 2 B = 0.061 GiB), not 0.43 GiB. No other cited log
    measures the sampler's share, so the constant is not refitted to this one."""
    rules = {e: kv_capacity("llama-3.1-8b", "rtx-3090", max_model_len=35000, engine=e)
             for e in ("vllm-0.6", "vllm-v1", "vllm-0.2")}
    assert {e: c.max_num_batched_tokens for e, c in rules.items()} == \
        {"vllm-0.6": 512, "vllm-v1": 8192, "vllm-0.2": 35000}
    off = {e: (c.weights_bytes + c.activation_peak_bytes) / (15.05 * GiB) - 1
           for e, c in rules.items()}
    assert abs(off["vllm-0.6"]) <= 0.03, off
    assert off["vllm-v1"] > 0.03 and off["vllm-0.2"] > 0.03, off


@pytest.mark.parametrize("max_len", [35000, 45000])
def test_v0_512_token_step_leaves_room_for_the_logged_lengths_issue10517(max_len):
    """The same comment's kv consequence past 32K: "It is strange that in my case I can run 20k,
    35k, or 45k, but if I set --max-model-len to 29k it throws an error" -- vLLM v0.6.4 refuses
    to start unless the cache holds one max_model_len sequence ("The model's max seq len
    (29000) is larger than the maximum number of tokens that can be stored in KV cache
    (23648)"), so "35k - OK" and "45k - OK" mean kv_tokens >= 35,000 and >= 45,000. With the
    512-token step txcalc's cache holds 44,608 tokens at both lengths (1.27 and 0.991 of one
    sequence: 45k is 0.9 % short, within 3 %, the sampler term of the test above); V1's
    8,192-token step leaves 36,208 (0.80 at 45k) and profiling the whole length (v0.2) 5,152.
    The RTX 3090 as in tests/test_serving.py: CUDA's total 23.58 GiB from vllm PR #14447."""
    import dataclasses

    from txcalc.hardware import get_gpu
    gpu = dataclasses.replace(get_gpu("rtx-3090"), usable_given=int(23.58 * GiB))
    tokens = {e: kv_capacity("llama-3.1-8b", gpu, max_model_len=max_len, engine=e).kv_tokens
              for e in ("vllm-0.6", "vllm-v1", "vllm-0.2")}
    assert tokens["vllm-0.6"] >= 0.97 * max_len, tokens
    assert tokens["vllm-0.2"] < 0.97 * max_len, tokens
    if max_len == 45000:
        assert tokens["vllm-v1"] < 0.97 * max_len, tokens


# --- vLLM V0 (v0.8-era worker.py) on two L40S: Qwen2.5-32B-Instruct at TP 2 ----------------------
#: Qwen/Qwen2.5-32B-Instruct, HF config.json (no preset)
QWEN25_32B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 5120,
              "intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 40,
              "num_key_value_heads": 8, "vocab_size": 152064, "max_position_embeddings": 32768,
              "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
              "hidden_act": "silu", "torch_dtype": "bfloat16"}


@pytest.mark.xfail(strict=True, reason="-10.4 % (3,535 vs 3,947 blocks) with CUDA's total as "
                   "logged (44.42 GiB; the catalog's l40s row gives 48 GiB x 0.99 = 47.52 GiB, "
                   "3.1 GiB more than CUDA reports on this L40S; with the catalog's figure "
                   "the row is +26 %). The log's split: "
                   "weights 30.71 GiB (txcalc 30.51), activation peak 1.26 (txcalc 1.06, the "
                   "fused-MLP group at 10,000 tokens), non_torch_memory 0.30 (txcalc 1.5: 1 "
                   "GiB context + 0.5 GiB NCCL, while this rule counts only what was added "
                   "since start-up); no log of this rule at TP 2 calibrates that term apart "
                   "from this row")
def test_kv_blocks_qwen25_32b_l40s_tp2_issue15815():
    """https://github.com/vllm-project/vllm/issues/15815 (Hemanth-stack, 2025-04-02; Qwen2.5-32B
    -Instruct, TP 2 on L40S, max_model_len 10,000): "the current vLLM instance can use
    total_gpu_memory (44.42GiB) x gpu_memory_utilization (0.90) = 39.98GiB / model weights take
    30.71GiB; non_torch_memory takes 0.30GiB; PyTorch activation peak memory takes 1.26GiB;
    the rest of the memory reserved for KV Cache is 7.71GiB. / # CUDA blocks: 3947". The V0
    worker of v0.7 on: weights + torch peak + non-torch memory added since start-up (engine
    "vllm"); no chunked prefill at 10,000 tokens, so the profile runs them all. CUDA's total is
    the log's (a device property, given as --gpu-gb would; no other L40S log was found)."""
    import dataclasses

    from txcalc.hardware import get_gpu
    from txcalc.hf import from_hf_dict
    cfg = from_hf_dict(QWEN25_32B, "Qwen/Qwen2.5-32B-Instruct")
    gpu = dataclasses.replace(get_gpu("l40s"), usable_given=int(44.42 * GiB))
    c = kv_capacity(cfg, gpu, tp=2, max_model_len=10000)
    assert c.block_bytes == 2 * 2**20  # 16 tokens x 64 layers x 2 x 4 KV heads x 128 x 2 B
    assert abs(c.kv_blocks / 3947 - 1) <= 0.03, c.kv_blocks


def test_plan_infer_engine_vllm06_uses_the_same_context_term():
    """``plan infer --engine vllm-0.6`` sizes the cache as the library call does (the CLI always
    passes Overheads; the default one leaves v0.6.4's context term in place), and an explicit
    --cuda-context-gib replaces it."""
    import json

    from typer.testing import CliRunner

    from txcalc.cli import app
    from txcalc.serving import V064_CUDA_CONTEXT_BYTES
    args = ["plan", "infer", "llama-3.1-8b", "--gpu", "h100", "--context", "40000",
            "--engine", "vllm-0.6", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["kv_capacity"]["non_torch_bytes"] == V064_CUDA_CONTEXT_BYTES
    assert d["kv_blocks"] == kv_capacity("llama-3.1-8b", "h100", tp=d["kv_capacity"]["tp"],
                                         max_model_len=40000, engine="vllm-0.6").kv_blocks
    r = CliRunner().invoke(app, args + ["--cuda-context-gib", "2"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["kv_capacity"]["non_torch_bytes"] == 2 * GiB
