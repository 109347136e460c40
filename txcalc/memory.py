"""Bytes: model states (weights, gradients, optimizer), activations, KV cache, the peak.

Precision policies (bytes per parameter):

    policy       | weights | grads | master (fp32) | optimizer state dtype | activations
    -------------|---------|-------|---------------|-----------------------|------------
    fp32         | 4       | 4     | -             | fp32                  | 4
    bf16-mixed   | 2       | 2     | 4             | fp32                  | 2
    fp16-mixed   | 2       | 2     | 4             | fp32                  | 2
    bf16 (pure)  | 2       | 2     | -             | bf16                  | 2

Optimizers (states per parameter): adamw/adam 2 (first and second moments); adam8bit 2 at
1 byte each plus one fp32 absmax per 2048-element block and state (bitsandbytes blockwise
quantisation, Dettmers et al. 2021, arXiv:2110.02861); sgd (momentum) 1; adafactor: factored
second moment, rows + columns per matrix and the full size for vectors (Shazeer and Stern
2018, arXiv:1804.04235; no momentum); none 0. As in the chapter's 80B example, the fp32
master copy of mixed precision is reported with the optimizer (2 + 2 + 12 = 16 bytes/param
for Adam).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .accounting import by_layer_type
from .components import model_ops
from .config import ModelConfig
from .errors import WorkloadError
from .ops import Op
from .workload import Workload

PRECISIONS = {  # name: (weight, grad, master, state, activation) bytes
    "fp32": (4, 4, 0, 4, 4),
    "bf16-mixed": (2, 2, 4, 4, 2),
    "fp16-mixed": (2, 2, 4, 4, 2),
    "bf16": (2, 2, 0, 2, 2),
}
OPTIMIZERS = ("adamw", "adam", "adam8bit", "sgd", "adafactor", "none")
#: bits per cached element
KV_DTYPES = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
ADAM8BIT_BLOCK = 2048


def _check(name: str, value: str, choices) -> str:
    if value not in choices:
        raise WorkloadError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
    return value


def optimizer_state_bytes(op: Op, optimizer: str, state_bytes: int) -> int:
    """Optimizer state of one op's parameters (all instances)."""
    n = op.params
    if n == 0 or optimizer == "none":
        return 0
    if optimizer in ("adamw", "adam"):
        per = 2 * n * state_bytes
    elif optimizer == "sgd":
        per = n * state_bytes
    elif optimizer == "adam8bit":
        per = 2 * n + 2 * 4 * -(-n // ADAM8BIT_BLOCK)
    else:  # adafactor: factored second moment for the weight matrix, full for the bias
        bias = n - op.d_in * op.d_out if op.kind == "linear" else n
        weight = n - bias
        per = ((op.d_in + op.d_out) if weight else 0) * 4 + bias * 4
    return per * op.instances


@dataclass(frozen=True)
class TrainingMemory:
    """Memory of one training step on one device (no parallelism), in bytes.

    ``total`` (the peak) = weights + gradients + optimizer (with master) + activations saved for backward
    + the logits transient at the start of backward (the lm_head's fp32 logits gradient).
    """

    cfg: ModelConfig
    work: Workload
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"

    def __post_init__(self) -> None:
        _check("precision", self.precision, PRECISIONS)
        _check("optimizer", self.optimizer, OPTIMIZERS)

    @cached_property
    def ops(self) -> tuple[Op, ...]:
        return tuple(model_ops(self.cfg))

    @property
    def _bytes(self):
        return PRECISIONS[self.precision]

    @cached_property
    def n_params(self) -> int:
        return sum(op.params_total for op in self.ops)

    @cached_property
    def weights(self) -> int:
        return self.n_params * self._bytes[0]

    @cached_property
    def gradients(self) -> int:
        return self.n_params * self._bytes[1]

    @cached_property
    def master(self) -> int:
        return self.n_params * self._bytes[2] if self.optimizer != "none" else 0

    @cached_property
    def optimizer_states(self) -> int:
        return sum(optimizer_state_bytes(op, self.optimizer, self._bytes[3]) for op in self.ops)

    @property
    def optimizer_total(self) -> int:
        """Optimizer states plus the fp32 master weights (the chapter's 12 bytes for Adam)."""
        return self.optimizer_states + self.master

    def op_activations(self, op: Op) -> int:
        return op.saved_bytes(self.work, self._bytes[4])

    @cached_property
    def activations(self) -> int:
        """Bytes saved for backward over the whole forward, under the recompute policy."""
        return sum(self.activations_by_layer().values())

    def activations_by_layer(self) -> dict[tuple[str, int], int]:
        """{(stack, layer): saved bytes}; layer -1 holds embeddings, final norm, head, loss.

        recompute full: a block keeps only its input (D wide, checkpointed) and rebuilds the
        rest during backward; selective: the S x S softmax is dropped and recomputed.
        """
        a = self._bytes[4]
        w = self.work
        out: dict[tuple[str, int], int] = {}
        for op in self.ops:
            key = (op.stack, op.layer)
            if w.recompute == "full" and op.layer >= 0:
                if key not in out:
                    rows = w.rows("src" if op.stack == "encoder" else "seq")
                    out[key] = rows * self.cfg.d_model * a
                continue
            b = op.saved_bytes(w, a, pairs=w.recompute != "selective")
            out[key] = out.get(key, 0) + b
        return out

    def activations_by_layer_type(self) -> list[dict]:
        """Saved bytes summed over blocks of the same kind, and outside the blocks."""
        return by_layer_type(self.cfg, {k: {"activations_bytes": v}
                                        for k, v in self.activations_by_layer().items()})

    @cached_property
    def logits_transient(self) -> int:
        """fp32 gradient of the logits, alive while backward starts (T x V x 4)."""
        if self.cfg.head != "lm":
            return 0
        return self.work.rows("seq") * self.cfg.vocab_size * 4

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.optimizer_total + self.activations
                + self.logits_transient)

    def to_json(self) -> dict:
        return {"model": self.cfg.name, "precision": self.precision, "optimizer": self.optimizer,
                "batch": self.work.batch, "seq": self.work.seq, "recompute": self.work.recompute,
                "attn_impl": self.work.attn_impl, "params": self.n_params,
                "weights_bytes": self.weights, "gradients_bytes": self.gradients,
                "optimizer_bytes": self.optimizer_total, "master_weights_bytes": self.master,
                "activations_bytes": self.activations, "logits_bytes": self.logits_transient,
                "kv_cache_bytes": 0, "total_bytes": self.total,
                "dropout": self.work.dropout,
                "activations_by_layer_type": self.activations_by_layer_type()}


def model_states(n_params: int, precision: str = "bf16-mixed", optimizer: str = "adamw") -> dict:
    """Weights, gradients and optimizer bytes (master included) of ``n_params`` parameters
    when only the count is known (no shapes): the chapter's 80B example, 2 + 2 + 12 bytes per
    parameter for Adam in fp16 mixed precision. Optimizers whose state depends on the shapes
    (adam8bit blocks, adafactor's factored moments) need a ModelConfig."""
    w, g, master, state, _ = PRECISIONS[_check("precision", precision, PRECISIONS)]
    _check("optimizer", optimizer, OPTIMIZERS)
    states = {"adamw": 2, "adam": 2, "sgd": 1, "none": 0}
    if optimizer not in states:
        raise WorkloadError(f"optimizer {optimizer!r} needs the model's shapes: give MODEL, "
                            "not --params")
    opt = n_params * (states[optimizer] * state + (master if optimizer != "none" else 0))
    out = {"model": f"{n_params:,} parameters", "params": n_params, "precision": precision,
           "optimizer": optimizer, "weights_bytes": n_params * w,
           "gradients_bytes": n_params * g, "optimizer_bytes": opt, "activations_bytes": 0,
           "kv_cache_bytes": 0}
    out["total_bytes"] = out["weights_bytes"] + out["gradients_bytes"] + opt
    return out


def kv_cache_bytes_per_token(cfg: ModelConfig, kv_dtype: str = "bf16") -> int:
    """Bytes one token adds to the cache over all layers (no window cap).

    Per decoder layer: k and v, K heads of h each (2 * K * h elements); MLA caches the
    compressed latent and the shared rotary key instead (kv_lora_rank + rope elements,
    DeepSeek-V2 arXiv:2405.04434 section 2.1.2).
    """
    return kv_cache_bytes(cfg, 1, 1, kv_dtype, window=False)


def kv_cache_bytes(cfg: ModelConfig, context: int, batch: int = 1, kv_dtype: str = "bf16",
                   window: bool = True, src_seq: int = 0) -> int:
    """KV cache of ``batch`` sequences at ``context`` tokens (self-attention) and, for
    encoder-decoder models, the cross-attention cache over ``src_seq`` source tokens.
    Sliding-window layers keep only the last ``window`` tokens."""
    bits = KV_DTYPES[_check("kv dtype", kv_dtype, KV_DTYPES)]
    if cfg.family == "encoder":
        raise WorkloadError(f"{cfg.name} is an encoder-only model: it has no KV cache")
    per_token = (cfg.kv_lora_rank + cfg.qk_rope_head_dim) if cfg.is_mla else 2 * cfg.kv_dim
    elements = 0
    for i in range(cfg.n_layers):
        tokens = context
        if window and cfg.window(i):
            tokens = min(context, cfg.window(i))
        elements += per_token * tokens
        if cfg.family == "encoder-decoder":
            elements += 2 * cfg.kv_dim * (src_seq or context)
    return -(-(elements * batch * bits) // 8)
