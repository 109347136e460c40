"""Serving command lines from a ``plan infer`` answer: ``vllm serve``, ``python -m
sglang.launch_server``, and ``trtllm-serve`` with its extra options YAML. The plan's KV sizing
(serve.kv: vLLM's profile rule, or TRT-LLM's free-memory fraction) decides which engines can
run it as planned:

    txcalc (kv_capacity)    | vllm serve (arg_utils.py)  | sglang (server_args.py) | trtllm-serve
    ------------------------|----------------------------|-------------------------|--------------
    tp, pp                  | --tensor/pipeline-         | --tp-size, --pp-size    | --tp_size,
                            |   parallel-size            |                         |  --pp_size
    ep (= tp)               | --enable-expert-parallel   | --ep-size               | --ep_size
    replicas (slo mode)     | --data-parallel-size       | --dp-size               | (one per copy)
    max_model_len           | --max-model-len            | --context-length        | --max_seq_len
    max_num_batched_tokens  | --max-num-batched-tokens   | --chunked-prefill-size  | --max_num_tokens
    max_num_seqs            | --max-num-seqs             | --max-running-requests  | --max_batch_size
    gpu_memory_utilization  | --gpu-memory-utilization   | --mem-fraction-static,  | (refused: it
                            |                            |  KV pool --max-total-   |  sizes by the
                            |                            |  tokens = kv_tokens     |  free fraction)
    free fraction (trtllm)  | (refused)                  | (refused)               | kv_cache_config
    block_size              | --block-size               | --page-size             | tokens_per_block
    kv_dtype                | --kv-cache-dtype           | --kv-cache-dtype        | kv_cache_config
    precision, weights      | --dtype, --quantization    | --dtype, --quantization | (16-bit only)
"""

from __future__ import annotations

from ..units import plural
from .common import SERVE_DTYPE, Emitted, comment, gib, header, refuse, shell_line, yaml

#: txcalc's --weights scheme family -> the --quantization name of vLLM and SGLang
QUANTIZATION = {"fp8": "fp8", "fp8-block": "fp8", "awq": "awq", "int4": "gptq",
                "int8": "gptq", "nf4": "bitsandbytes", "mxfp4": "mxfp4",
                "nvfp4": "modelopt_fp4", "gguf": "gguf"}
#: the plan's serving quantities -> (vllm serve flag, sglang.launch_server flag)
FLAGS = {"tp": ("--tensor-parallel-size", "--tp-size"),
         "pp": ("--pipeline-parallel-size", "--pp-size"),
         "replicas": ("--data-parallel-size", "--dp-size"),
         "max_model_len": ("--max-model-len", "--context-length"),
         "max_num_batched_tokens": ("--max-num-batched-tokens", "--chunked-prefill-size"),
         "max_num_seqs": ("--max-num-seqs", "--max-running-requests"),
         "gpu_memory_utilization": ("--gpu-memory-utilization", "--mem-fraction-static"),
         "block_size": ("--block-size", "--page-size"),
         "kv_dtype": ("--kv-cache-dtype", "--kv-cache-dtype"),
         "precision": ("--dtype", "--dtype"),
         "weights": ("--quantization", "--quantization")}
VLLM, SGLANG = 0, 1  #: FLAGS' columns
#: kv_dtype -> vLLM's --kv-cache-dtype and SGLang's (a 16-bit KV cache is "auto": the dtype's)
KV_VLLM = {"bf16": "auto", "fp16": "auto", "fp32": "auto", "fp8": "fp8"}
KV_SGLANG = {"bf16": "auto", "fp16": "auto", "fp32": "auto", "fp8": "fp8_e4m3"}


class ServeFacts:
    """What the emitters read off a ``plan infer`` answer."""

    def __init__(self, fmt: str, ans, command: str, model: str):
        j = ans.json
        self.fmt, self.command, self.model, self.json = fmt, command, model, j
        self.mode = ans.parts["mode"]
        if self.mode == "offline":
            refuse(fmt, "--rate inf", "the offline plan models trtllm-bench's batch; plan a "
                   "served load (--rate N or --concurrency N) to emit a server")
        if j.get("mode") == "disaggregated":
            refuse(fmt, "disaggregated prefill/decode", "one server command runs colocated "
                   "replicas; pin --replicas or plan without disaggregation")
        if j.get("context_parallel"):
            refuse(fmt, "context-parallel prefill", "not among this server's options")
        self.kv = j.get("kv_capacity")
        if self.kv is None:
            refuse(fmt, "KV cache", "the plan has no paged KV cache to size")
        self.tp, self.pp = j["tp"], j["pp"]
        self.ep = j.get("ep", 1) or 1
        self.replicas = j["replicas"]
        self.precision = ans.parts["precision"]
        self.kv_dtype = j.get("kv_dtype") or ans.parts["kv_dtype"]
        self.weights = j.get("weights") or self.kv.get("weights") or self.precision
        if self.precision not in SERVE_DTYPE:
            refuse(fmt, f"precision {self.precision}", "give --precision bf16, fp16 or fp32")
        if self.kv_dtype in ("bf16", "fp16", "fp32") and self.kv_dtype != self.precision:
            refuse(fmt, f"kv dtype {self.kv_dtype} with {self.precision} weights",
                   "a 16-bit KV cache takes the model's dtype")
        self.engine = self.kv["engine"]

    def quantization(self) -> str | None:
        """--quantization for the plan's weights; None for 16-bit weights."""
        w = self.weights or ""
        if w in ("bf16", "fp16", "fp32", ""):
            return None
        family = "gguf" if w.startswith("gguf") else w.split("-g")[0]
        q = QUANTIZATION.get(family) or QUANTIZATION.get(family.split("-")[0])
        if q is None:
            refuse(self.fmt, f"weights {w}", "no --quantization of that name")
        return q

    def figures(self) -> list[str]:
        j, kv = self.json, self.kv
        out = [f"tp {self.tp} x pp {self.pp}" + (f" ep {self.ep}" if self.ep > 1 else "")
               + f", {plural(self.replicas, 'replica')}, {plural(j['total_gpus'], 'GPU')}",
               (f"memory per GPU {gib(kv['budget_bytes'])} budget: weights "
               f"{gib(kv['weights_bytes'])}, KV cache {gib(kv['kv_cache_bytes'])} "
               f"({kv['kv_tokens']:,} tokens)")]
        if self.mode == "slo":
            out.append(f"TTFT p50/p99 {j['ttft_p50_s']:.3f}/{j['ttft_p99_s']:.3f} s, ITL "
                       f"p50/p99 {j['itl_p50_s'] * 1e3:.1f}/{j['itl_p99_s'] * 1e3:.1f} ms, "
                       f"{j['output_tokens_per_s']:,.0f} output tokens/s at "
                       + (f"{j['rate']:g} requests/s" if j.get("rate") is not None
                          else f"{j['concurrency']} clients")
                       + f" ({j['input_len']:,} in / {j['output_len']:,} out)")
        else:
            out.append(f"{j['concurrency']} sequences of {j['context']:,} tokens: prefill "
                       f"{j['prefill_latency_s']:.2f} s, decode {j['decode_tokens_per_s']:,.0f} "
                       "tokens/s")
        return out

    def need_engine(self, engines: tuple[str, ...], give: str) -> None:
        if not any(self.engine.startswith(e) for e in engines):
            refuse(self.fmt, f"KV sized by engine {self.engine}", f"give --engine {give}")

    def kv_map(self, table: dict) -> str:
        v = table.get(self.kv_dtype)
        if v is None:
            refuse(self.fmt, f"kv dtype {self.kv_dtype}", f"this server's KV cache dtypes are "
                   f"{', '.join(sorted(table))}")
        return v

    def common(self, column: int, kv_table: dict) -> list[tuple[str, object]]:
        """The FLAGS both servers share, in ``column``'s spelling, with the plan's values."""
        kv = self.kv
        values = {"tp": self.tp, "pp": self.pp, "replicas": self.slo_replicas(),
                  "kv_dtype": self.kv_map(kv_table), "precision": SERVE_DTYPE[self.precision],
                  "weights": self.quantization(),
                  **{k: kv[k] for k in ("max_model_len", "max_num_batched_tokens",
                                        "max_num_seqs", "gpu_memory_utilization",
                                        "block_size")}}
        return [(flags[column], values[k]) for k, flags in FLAGS.items()]

    def slo_replicas(self) -> int | None:
        """Replicas as a data-parallel size: the SLO plan's; the capacity plan's replicas only
        scale throughput (a header line)."""
        return self.replicas if self.mode == "slo" and self.replicas > 1 else None


def vllm(ans, command: str, model: str) -> Emitted:
    """``vllm serve MODEL ...`` (vllm/engine/arg_utils.py names every flag)."""
    f = ServeFacts("vllm", ans, command, model)
    f.need_engine(("vllm",), "vllm")
    kv = f.kv
    if f.ep > 1 and (f.ep != f.tp or f.slo_replicas()):
        refuse("vllm", f"ep {f.ep} with tp {f.tp}", "vLLM's expert parallel size is tp x "
               "data-parallel size")
    flags = f.common(VLLM, KV_VLLM) + [
        ("--enable-expert-parallel", f.ep > 1), ("--enable-chunked-prefill", True),
        ("--enable-prefix-caching", kv.get("prefix_hit_rate", 0) > 0)]
    text = "#!/bin/sh\n" + comment(header(command, f.figures())) + shell_line(
        ["vllm", "serve", model], flags)
    return Emitted("serve.sh", {"serve.sh": text})


def sglang(ans, command: str, model: str) -> Emitted:
    """``python -m sglang.launch_server ...`` (python/sglang/srt/server_args.py names every
    flag). The KV pool is pinned to the plan's tokens (--max-total-tokens), since SGLang's own
    rule (--mem-fraction-static) sizes it differently."""
    f = ServeFacts("sglang", ans, command, model)
    f.need_engine(("vllm",), "vllm (the KV pool is then pinned to its tokens)")
    kv = f.kv
    flags = [("--model-path", model), *f.common(SGLANG, KV_SGLANG),
             ("--ep-size", f.ep if f.ep > 1 else None),
             ("--max-total-tokens", kv["kv_tokens"]),
             ("--disable-radix-cache", kv.get("prefix_hit_rate", 0) == 0)]
    text = "#!/bin/sh\n" + comment(header(command, f.figures())) + shell_line(
        ["python", "-m", "sglang.launch_server"], flags)
    return Emitted("serve.sh", {"serve.sh": text})


def trtllm(ans, command: str, model: str) -> Emitted:
    """``trtllm-serve MODEL --extra_llm_api_options extra.yaml`` (PyTorch backend): the
    line's flags and the YAML's kv_cache_config (tensorrt_llm/llmapi/llm_args.py)."""
    f = ServeFacts("trtllm", ans, command, model)
    f.need_engine(("trtllm",), "trtllm (TRT-LLM sizes its KV cache by free-memory fraction)")
    kv = f.kv
    if f.quantization() is not None:
        refuse("trtllm", f"weights {f.weights}", "trtllm-serve reads a ModelOpt-quantised "
               "checkpoint's own config; plan its 16-bit weights or serve with vllm")
    if f.kv_dtype not in ("bf16", "fp16", "fp8"):
        refuse("trtllm", f"kv dtype {f.kv_dtype}", "TRT-LLM's KV cache is 16-bit or fp8")
    extra = {"enable_chunked_prefill": True,
             "kv_cache_config": {"free_gpu_memory_fraction":
                                 kv["kv_cache_free_gpu_mem_fraction"],
                                 "tokens_per_block": kv["block_size"],
                                 "enable_block_reuse": kv.get("prefix_hit_rate", 0) > 0}}
    if f.kv_dtype == "fp8":
        extra["kv_cache_config"]["dtype"] = "fp8"
    figures = f.figures() + ([f"replicas: run {f.replicas} copies behind a load balancer"]
                             if f.replicas > 1 else [])
    line = "#!/bin/sh\n" + comment(header(command, figures)) + shell_line(
        ["trtllm-serve", model],
        [("--backend", "pytorch"), ("--tp_size", f.tp), ("--pp_size", f.pp),
         ("--ep_size", f.ep if f.ep > 1 else None),
         ("--max_batch_size", kv["max_num_seqs"]),
         ("--max_num_tokens", kv["max_num_batched_tokens"]),
         ("--max_seq_len", kv["max_model_len"]),
         ("--kv_cache_free_gpu_memory_fraction", kv["kv_cache_free_gpu_mem_fraction"]),
         ("--extra_llm_api_options", "extra_llm_api_options.yaml")])
    return Emitted("serve.sh", {"serve.sh": line, "extra_llm_api_options.yaml":
                                comment(header(command, figures)) + yaml(extra)})
