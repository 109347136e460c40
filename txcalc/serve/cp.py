"""Context-parallel prefill of one long prompt (128K-1M tokens): ring attention over cp
groups of tp GPUs, pass-KV or pass-Q (Yang et al. 2024, "Context Parallelism for Scalable
Million-Token Inference", arXiv:2411.01783).

The prompt's T new tokens (after P cached ones) are split over cp ranks, load-balanced (each
rank holds two mirrored chunks, so every rank attends to the same number of causal pairs).
Per rank and layer:

    term              | value
    ------------------|------------------------------------------------------------------------
    Linears           | T / cp tokens x Linear FLOPs per token / (tp x matmul rate)
    attention         | (T P + T (T + 1) / 2) / cp pairs x FLOPs per pair / (tp x attention
                      |   rate), in cp ring steps of equal share
    TP all-reduces    | 2 per layer over T / cp tokens of d_model (as in serving_sim)
    ring, pass-KV     | cp - 1 sends of the K and V of (T + P) / cp tokens (one TP rank's KV
                      |   heads): 2 K h bytes per token
    ring, pass-Q      | cp - 1 sends of the queries of T / cp tokens, and as many sends of their
                      |   partial outputs back (H h bytes each, + H fp32 log-sum-exps)
    overlap           | each ring step's send overlaps that step's attention (comm.py's
                      |   assumption): a layer's attention takes step + (cp - 1) x max(step, send)

pass-KV sends less whenever (T + P) x 2K < T x 2H (+ the LSEs), i.e. when the share of the
context still to prefill, T / (T + P), is above about K / H: full prefill of a GQA model
always (K / H = 1/8 for Llama-3); pass-Q only when most of the context is cached (persistent
KV, multi-turn). ``variant="auto"`` takes the faster. Rates, FLOPs and KV bytes come from
``serving_sim.step_model`` (the engine's op list); links from ``parallel.comm``.

Attention kernel (``attention_kernel``): "profile" (default) rates attention by the GPU's
DeviceProfile, on H100s FlashAttention-2's measured speed (timing.GPU_EFFICIENCY, also used
for training); "fa3" by FlashAttention-3's forward on Hopper (Shah et al. 2024,
arXiv:2407.08608, abstract: "FlashAttention-3 achieves speedup on H100 GPUs by 1.5-2.0x with
FP16 reaching up to 740 TFLOPs/s (75% utilization)"): FA3_FORWARD_EFFICIENCY of the dense
16-bit peak. Serving prefill at 128K-1M tokens is attention-bound (at 1M on Llama-3.1-405B
attention is about 9 in 10 of the FLOPs), so the kernel sets the answer there.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TxcalcError

VARIANTS = ("auto", "pass-kv", "pass-q")
ATTENTION_KERNELS = ("profile", "fa3")
#: FlashAttention-3's forward on H100 SXM: 740 TFLOPs/s fp16 = 75 % of the 989.5 TFLOPS dense
#: peak (Shah et al. 2024, arXiv:2407.08608, abstract)
FA3_FORWARD_EFFICIENCY = 0.75
#: FA3 is a Hopper (sm_90) kernel: the catalog's Hopper GPUs
HOPPER = ("h100-sxm", "h100-pcie", "h200", "h800")


class CpError(TxcalcError):
    """A context-parallel question that cannot be answered (bad degree, variant)."""


@dataclass(frozen=True)
class CpPrefill:
    cp: int
    tp: int
    variant: str
    new_tokens: int
    cached_tokens: int
    prefill_s: float  #: the prompt's time to first token (no queueing)
    linear_s: float
    attention_s: float
    ring_exposed_s: float  #: ring sends not hidden behind attention
    tp_comm_s: float
    ring_bytes_per_gpu: int  #: bytes one rank sends over the ring, all layers
    kv_bytes_per_gpu: int  #: the prompt's KV cache on one GPU after prefill
    flops: int  #: the prompt's FLOPs, all GPUs

    def to_json(self) -> dict:
        from dataclasses import asdict
        return asdict(self)


def ring_bytes(cfg, tp: int, new: int, cached: int, cp: int, variant: str,
               act_bytes: int, kv_bytes_per_token_layer: int) -> int:
    """Bytes one rank sends over the ring per layer (see the module table); pass-KV sends
    the cache as stored (``kv_bytes_per_token_layer``: one TP rank, one layer, the engine's
    kvcache.kv_cache_bytes_per_token), pass-Q each query (H / tp heads of head_dim) and its
    partial output back with one fp32 log-sum-exp per head."""
    if variant == "pass-kv":
        return (cp - 1) * -(-(new + cached) // cp) * kv_bytes_per_token_layer
    h_local = cfg.n_heads // tp
    per_token = 2 * h_local * cfg.head_dim * act_bytes + 4 * h_local
    return (cp - 1) * -(-new // cp) * per_token


def cp_prefill(model, gpu, input_len: int, *, cp: int, tp: int = 1, cached_tokens: int = 0,
               variant: str = "auto", weights: str | None = None, kv_dtype: str = "bf16",
               precision: str = "bf16", profile=None, gpu_file=None,
               attention_kernel: str = "profile") -> CpPrefill:
    """Time to prefill one prompt of ``input_len`` tokens (``cached_tokens`` of them already
    in the cache) on cp x tp GPUs (see the module table; ``attention_kernel``: "profile" or
    "fa3", module docstring)."""
    from .setting import serve_setting
    return prefill_on_cp(serve_setting(model, gpu, kv_dtype=kv_dtype, precision=precision,
                                       weights=weights, profile=profile, gpu_file=gpu_file),
                         input_len, cp=cp, tp=tp, cached_tokens=cached_tokens, variant=variant,
                         attention_kernel=attention_kernel)


def prefill_on_cp(s, input_len: int, *, cp: int, tp: int = 1, cached_tokens: int = 0,
                  variant: str = "auto", attention_kernel: str = "profile") -> CpPrefill:
    """``cp_prefill`` of a resolved ``serve.setting.ServeSetting``."""
    from .. import inputs as I
    from ..parallel import comm
    from .sim import replica_steps
    input_len = I.integer("input_len", input_len, 1, I.MAX_SEQ)
    cp = I.integer("cp", cp, 1, I.MAX_GPUS)
    tp = I.integer("tp", tp, 1, I.MAX_GPUS)
    cached = I.integer("cached_tokens", cached_tokens, 0, I.MAX_SEQ)
    if cached >= input_len:
        raise CpError(f"cached_tokens ({cached:,}) must be below input_len ({input_len:,})")
    if variant not in VARIANTS:
        raise CpError(f"variant ({I.show(variant)}) must be one of {', '.join(VARIANTS)}")
    if attention_kernel not in ATTENTION_KERNELS:
        raise CpError(f"attention_kernel ({I.show(attention_kernel)}) must be one of "
                      f"{', '.join(ATTENTION_KERNELS)}")
    cfg, g = s.cfg, s.gpu
    if attention_kernel == "fa3" and g.name not in HOPPER:
        raise CpError(f"attention_kernel fa3 is a Hopper kernel; {g.name} is not one of "
                      f"{', '.join(HOPPER)}")
    if cfg.n_heads % tp:
        raise CpError(f"tp ({tp}) must divide {cfg.name}'s n_heads ({cfg.n_heads})")
    sm = replica_steps(s, tp=tp, kv_capacity_tokens=0)
    act = s.prec.act
    n_layers = max(1, sm.n_allreduce // 2)
    kvb = -(-sm.kv_bytes_per_token // n_layers)
    new = input_len - cached
    local = -(-new // cp)
    pairs = new * cached + new * (new + 1) // 2
    linear = (local * sm.lin_flops_per_token + sm.head_flops_per_row) \
        / (tp * sm.matmul_flops_per_s)
    # FA3's figure is its 16-bit forward: attention runs in bf16/fp16 whatever the weights
    attn_rate = sm.attn_flops_per_s if attention_kernel == "profile" else \
        FA3_FORWARD_EFFICIENCY * g.peak("bf16")
    attn = -(-pairs // cp) * sm.attn_flops_per_pair / (tp * attn_rate)
    tp_comm = sm.n_allreduce * (sm.ar_latency_s + local * sm.ar_s_per_token) if tp > 1 else 0.0
    bw, lat = (float(x) for x in comm.link(cp, tp, g))

    def ring(v: str) -> tuple[float, int]:
        if cp == 1:
            return 0.0, 0
        per_layer = ring_bytes(cfg, tp, new, cached, cp, v, act, kvb)
        send = lat + per_layer / (cp - 1) / bw  # one ring step's send, one layer
        step = attn / n_layers / cp  # one ring step's attention, one layer
        exposed = n_layers * (cp - 1) * max(0.0, send - step)
        return exposed, per_layer * n_layers
    options = [variant] if variant != "auto" else ["pass-kv", "pass-q"]
    best = min(options, key=lambda v: ring(v)[0])
    exposed, sent = ring(best)
    flops = new * sm.lin_flops_per_token + sm.head_flops_per_row + pairs * sm.attn_flops_per_pair
    kv_gpu = -(-input_len // cp) * sm.kv_bytes_per_token
    return CpPrefill(cp, tp, best, new, cached, linear + attn + exposed + tp_comm, linear,
                     attn, exposed, tp_comm, sent, kv_gpu, flops)
