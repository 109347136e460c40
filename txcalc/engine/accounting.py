"""Sums over Op rows: totals, per-component and per-layer-type views. No formula lives here.

The plain-Python views (lists of dicts) serve the CLI, which must not import pandas; the
DataFrame views wrap the same rows for library users.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from .components import model_ops, model_ops_tuple, step_ops
from ..model.config import ModelConfig
from .ops import FLOP_KINDS, Op, rerun_ops


def layer_type(cfg: ModelConfig, stack: str, layer: int) -> str:
    """A short label that groups identical blocks: 'decoder dense', 'moe (window 4096)'."""
    parts = [stack] if stack else []
    if cfg.mixers or cfg.ffns:  # hybrids: the mixer and the FFN name the block
        parts.append(f"{cfg.mixer(layer)} + {cfg.ffn(layer)}")
        if layer in cfg.shared_attn_layers:  # Zamba: its block's weights, a reuse, a copy
            j, n = cfg.shared_attn_layers.index(layer), cfg.shared_attn_blocks
            parts.append(f"+ shared attn (copy {j % n})" if not cfg.shared_attn_tied else
                         "+ shared attn" if j < n else "+ shared attn (reused)")
    elif layer in cfg.cross_layers:  # Mllama
        parts.append("gated cross-attention")
    else:
        parts.append("moe" if stack != "encoder" and cfg.is_moe_layer(layer) else "dense")
    if len(set(cfg.layer_d_ff)) > 1:  # Gemma 3n: a width per layer
        parts.append(f"ffn {cfg.layer_ffn_width(layer)}")
    if layer in cfg.kv_shared_layers:
        parts.append("shared KV")
    if cfg.act_sparsity and cfg.act_sparsity[layer]:  # Gemma 3n: saves the cutoff's statistics
        parts.append("sparse act")
    if stack != "encoder" and cfg.window(layer):
        parts.append(f"window {cfg.window(layer)}")
    if stack != "encoder" and cfg.chunk(layer):
        parts.append(f"chunk {cfg.chunk(layer)}")
    if cfg.nope_layers and not cfg.rotary(layer):
        parts.append("no rope")
    return " ".join(parts)


def block_kind(cfg: ModelConfig, stack: str, layer: int, first_rotary: int) -> tuple:
    """A key equal for two blocks of ``stack`` whose ops hold the same parameters: the
    ``layer_type`` label, whether the block owns its weights (ALBERT) and its q/k norm
    (Llama 4's L2 norm on rotary layers). A block that is the only one of its kind keys by
    its index: the first (no attn_norm without ``first_attn_norm``, cross-attention's k_proj
    saves the encoder output there, DeBERTa's shared norm), the one that holds the rotary
    tables, a gated cross-attention block (the first owns the vision projection), a Zamba
    shared-attention use (its copy and adapters) and a Gemma 3n block (AltUp, per-layer
    inputs). ``first_rotary``: attention._first_rotary(cfg, stack). tests/conformance/test_param_totals.py
    checks ``param_totals`` against ``count_params`` for every preset and model_type."""
    if (layer == 0 or layer == first_rotary or layer in cfg.cross_layers
            or layer in cfg.shared_attn_layers or cfg.altup_inputs):
        return (stack, layer)
    return (stack, layer_type(cfg, stack, layer), cfg.owns_params(layer),
            cfg.qk_norm_at(layer))


def by_layer_type(cfg: ModelConfig, per_layer: dict[tuple[str, int], dict[str, int]]) -> list[dict]:
    """Sum {(stack, layer): {quantity: value}} over blocks of the same kind (``layer_type``);
    layer -1 (embeddings, final norm, head, loss) is its own row, "outside blocks"."""
    rows: dict[str, dict] = {}
    for (stack, layer), values in per_layer.items():
        label = "outside blocks" if layer < 0 else layer_type(cfg, stack, layer)
        row = rows.setdefault(label, {"layer_type": label, "layers": 0, **dict.fromkeys(values, 0)})
        row["layers"] += layer >= 0
        for k, v in values.items():
            row[k] += v
    return sorted(rows.values(), key=lambda r: r["layer_type"] == "outside blocks")


def _layer_list(layers: list[int], most: int = 4) -> str:
    """"layer 0", "layers 0, 3, 6", "layers 0, 3, 6, 9, ... (12 blocks)"."""
    shown = ", ".join(str(i) for i in layers[:most])
    more = f", ... ({len(layers)} blocks)" if len(layers) > most else ""
    return f"layer{'s' if len(layers) > 1 else ''} {shown}{more}"


def _group(ops: Iterable[Op], key) -> dict[str, list[Op]]:
    groups: dict[str, list[Op]] = {}
    for op in ops:
        groups.setdefault(key(op), []).append(op)
    return groups


@dataclass(frozen=True)
class ParamCounts:
    """Parameter accounting of one model: exact integers, grouped views, DataFrames."""

    cfg: ModelConfig
    ops: tuple[Op, ...]

    @cached_property
    def total(self) -> int:
        """Every parameter, tied weights once, all experts."""
        return sum(op.params_total for op in self.ops)

    @cached_property
    def active(self) -> int:
        """Parameters one token uses: routed experts count top-k times, not E times."""
        return sum(op.params_active for op in self.ops)

    @cached_property
    def embedding(self) -> int:
        """Lookup tables (token, position, type, relative bias): no matmul FLOPs."""
        return sum(op.params_total for op in self.ops if op.kind == "embedding")

    def by_component(self) -> list[dict]:
        """One row per component kind, summed over layers (``attn.q_proj`` over all L)."""
        def key(op: Op) -> str:
            return f"{op.stack}.{op.component}" if op.stack else op.component
        rows = []
        for name, ops in _group(self.ops, key).items():
            total = sum(o.params_total for o in ops)
            rows.append({"component": name, "count": len(ops), "params": total,
                         "active_params": sum(o.params_active for o in ops),
                         "share": total / self.total if self.total else 0.0})
        return rows

    def by_layer_type(self) -> list[dict]:
        """One row per kind of block: how many such blocks and the parameters of one.

        Blocks of one ``layer_type`` label whose parameters differ (ModernBERT's block 0 has
        no attention norm; the block that holds the rotary tables) are rows of their own:
        the label's most common parameter count keeps the label, each other one is labelled
        with its blocks' indices ("dense (layer 0)"). Every row's ``params`` is
        ``layers * params_per_layer``, exactly the sum over its blocks."""
        in_blocks = [op for op in self.ops if op.layer >= 0]
        per_layer = _group(in_blocks, lambda o: (o.stack, o.layer))
        # label -> (params, active) of one block -> the block indices that hold that many
        kinds: dict[str, dict[tuple[int, int], list[int]]] = {}
        for (stack, layer), ops in per_layer.items():
            counts = (sum(o.params_total for o in ops), sum(o.params_active for o in ops))
            kinds.setdefault(layer_type(self.cfg, stack, layer), {}).setdefault(
                counts, []).append(layer)
        out = []
        for label, variants in kinds.items():
            # the most blocks keep the plain label (a tie: the earlier first block)
            main = min(variants, key=lambda c: (-len(variants[c]), variants[c][0]))
            for (params, active), layers in sorted(variants.items(), key=lambda kv: kv[1][0]):
                out.append({"layer_type": label if (params, active) == main else
                            f"{label} ({_layer_list(layers)})",
                            "layers": len(layers), "params_per_layer": params,
                            "active_per_layer": active, "first_layer": layers[0],
                            "params": len(layers) * params})
        outside = [op for op in self.ops if op.layer < 0]
        out.append({"layer_type": "outside blocks", "layers": 0, "params_per_layer": 0,
                    "active_per_layer": 0, "first_layer": -1,
                    "params": sum(o.params_total for o in outside)})
        return out

    def by_layer(self) -> list[dict]:
        """One row per block (and one for everything outside the blocks)."""
        rows = []
        for key, ops in _group(self.ops, lambda o: (o.stack, o.layer)).items():
            rows.append({"stack": key[0], "layer": key[1],
                         "params": sum(o.params_total for o in ops),
                         "active_params": sum(o.params_active for o in ops)})
        return rows

    # --- pandas views (library use; the CLI never calls these) -----------------------------
    def ops_frame(self):
        import pandas as pd
        return pd.DataFrame([{"path": o.path, "kind": o.kind, "stack": o.stack, "layer": o.layer,
                              "component": o.component, "params": o.params_total,
                              "active_params": o.params_active, "instances": o.instances}
                             for o in self.ops])

    def component_frame(self):
        import pandas as pd
        return pd.DataFrame(self.by_component())

    def layer_frame(self):
        import pandas as pd
        return pd.DataFrame(self.by_layer())

    def to_json(self) -> dict:
        return {"model": self.cfg.name, "total_params": self.total, "active_params": self.active,
                "embedding_params": self.embedding,
                "non_embedding_params": self.total - self.embedding,
                "by_component": self.by_component(), "by_layer_type": self.by_layer_type()} | (
                    {"language_model_params": self.total - self.cfg.vision_params,
                     "vision_params": self.cfg.vision_params} if self.cfg.vision_params else {})


def count_params(cfg: ModelConfig) -> ParamCounts:
    from ..inputs import CONFIG_HINT, instance
    instance("cfg", cfg, ModelConfig, CONFIG_HINT)
    # checkpoint rows (what recompute keeps) have no parameters: not a component here
    # the cached ops (model_ops_tuple): `txcalc params` reads them again for the checkpoint
    return ParamCounts(cfg, tuple(op for op in model_ops_tuple(cfg) if op.kind != "checkpoint"))


def param_totals(cfg: ModelConfig) -> tuple[int, int]:
    """(total, active) parameters of ``count_params(cfg)``, with each kind of block
    (``block_kind``) built once and its ops summed once per block of that kind: the same
    ops and the same sums, without building a 126-layer model's blocks 126 times
    (``txcalc presets`` counts every preset)."""
    from .attention import _first_rotary
    from .components import block
    from ..inputs import CONFIG_HINT, instance
    instance("cfg", cfg, ModelConfig, CONFIG_HINT)
    kinds: dict[tuple, list] = {}  # block_kind -> [its ops, how many blocks]
    first_rotary = {stack: _first_rotary(cfg, stack) for stack, _ in cfg.stacks}

    def once(cfg: ModelConfig, stack: str, layer: int) -> tuple:
        key = block_kind(cfg, stack, layer, first_rotary[stack])
        if key not in kinds:
            kinds[key] = [tuple(block(cfg, stack, layer)), 0]
        kinds[key][1] += 1
        return ()  # counted in kinds

    groups = [(model_ops(cfg, once), 1)] + [(ops, n) for ops, n in kinds.values()]
    # checkpoint rows (what recompute keeps) have no parameters, as in count_params
    return tuple(sum(n * sum(getattr(op, q) for op in ops if op.kind != "checkpoint")
                     for ops, n in groups) for q in ("params_total", "params_active"))


@dataclass(frozen=True)
class FlopCounts:
    """Matmul FLOPs of one training step (forward, loss, backward) under a workload.

    ``forward``/``backward`` are executed FLOPs (full S x S attention, what dense kernels run
    and torch's FlopCounterMode counts). ``model`` is forward + backward with masked attention
    pairs skipped (causal, sliding window): the numerator of MFU. ``recompute`` is the extra
    forward work of activation recomputation; hardware FLOPs (HFU) = executed + recompute.
    Elementwise work (norms, softmax, activations, the loss) is not matmul work and is not
    counted, as in FlopCounterMode and in MFU conventions (PaLM, arXiv:2204.02311, App. B).
    """

    cfg: ModelConfig
    work: object
    ops: tuple[Op, ...]

    @cached_property
    def forward(self) -> int:
        return forward_flops(self.ops, self.work)

    @cached_property
    def backward(self) -> int:
        return backward_flops(self.ops, self.work)

    @cached_property
    def model(self) -> int:
        return forward_flops(self.ops, self.work, True) + backward_flops(self.ops, self.work, True)

    @cached_property
    def recompute(self) -> int:
        """Forward work run again in backward: the ops' recompute class (``Op.reruns``;
        selective: the attention core, Korthikanti et al. arXiv:2205.05198; full: blocks)."""
        return recompute_flops(self.ops, self.work)

    @property
    def hardware(self) -> int:
        return self.forward + self.backward + self.recompute

    def prefill(self, model: bool = False) -> int:
        """Forward of the prompt batch, the output head on the last position only."""
        return sum(op.prefill_flops(self.work, model) for op in self.ops)

    def decode(self, context: int, model: bool = True) -> int:
        """One new token for each of the batch's sequences, ``context`` tokens cached (the new
        one included); ``model=False`` scans the whole cache even where a window limits it."""
        from ..inputs import MAX_SEQ, integer
        w = self.work
        context = integer("context", context, 1, MAX_SEQ)
        return sum(op.decode_flops(w.batch, context, w.src_seq, model) for op in self.ops)

    def rows(self) -> list[dict]:
        w = self.work
        return [{"path": op.path, "component": op.component, "stack": op.stack,
                 "layer": op.layer, "kind": op.kind, "forward_flops": op.fwd_flops(w),
                 "backward_flops": op.bwd_flops(w),
                 "model_flops": op.fwd_flops(w, True) + op.bwd_flops(w, True)}
                for op in self.ops if op.kind in FLOP_KINDS]

    def by_component(self) -> list[dict]:
        out: dict[str, dict] = {}
        for r in self.rows():
            key = f"{r['stack']}.{r['component']}" if r["stack"] else r["component"]
            row = out.setdefault(key, {"component": key, "forward_flops": 0,
                                       "backward_flops": 0, "model_flops": 0})
            for k in ("forward_flops", "backward_flops", "model_flops"):
                row[k] += r[k]
        return list(out.values())

    def by_layer_type(self) -> list[dict]:
        per_layer: dict[tuple[str, int], dict[str, int]] = {}
        for r in self.rows():
            d = per_layer.setdefault((r["stack"], r["layer"]), dict.fromkeys(
                ("forward_flops", "backward_flops", "model_flops"), 0))
            for k in d:
                d[k] += r[k]
        return by_layer_type(self.cfg, per_layer)

    def frame(self):
        import pandas as pd
        return pd.DataFrame(self.rows())

    def to_json(self) -> dict:
        w = self.work
        return {"model": self.cfg.name, "batch": w.batch, "seq": w.seq, "src_seq": w.src_seq,
                "attn_impl": w.attn_impl, "recompute": w.recompute,
                "forward_flops": self.forward, "backward_flops": self.backward,
                "model_flops": self.model, "recompute_flops": self.recompute,
                "hardware_flops": self.hardware, "by_component": self.by_component(),
                "by_layer_type": self.by_layer_type(),
                **({"global_tokens": w.global_tokens} if self.cfg.global_qkv else {})}


def forward_flops(ops, work, model: bool = False) -> int:
    """Forward matmul FLOPs of any ops (``model``: masked attention pairs skipped)."""
    return sum(op.fwd_flops(work, model) for op in ops)


def backward_flops(ops, work, model: bool = False) -> int:
    return sum(op.bwd_flops(work, model) for op in ops)


def recompute_flops(ops, work) -> int:
    """Forward FLOPs that the recompute policy runs again during backward."""
    return sum(op.fwd_flops(work) for op in rerun_ops(ops, work))


def count_flops(cfg: ModelConfig, work, finetune=None) -> FlopCounts:
    """FLOPs of one training step; ``finetune`` (txcalc.engine.finetune.Finetune): frozen Linears
    run no weight gradient, adapters add their forward and full backward; a text-only batch
    (``work.text_only``) skips Mllama's cross-attention blocks (components.step_ops)."""
    from .finetune import Finetune, finetuned_ops
    from ..inputs import CONFIG_HINT, instance
    from .workload import Workload
    instance("cfg", cfg, ModelConfig, CONFIG_HINT)
    if finetune is not None:
        instance("finetune", finetune, Finetune)
    work = instance("work", work, Workload)
    return FlopCounts(cfg, work, step_ops(cfg, finetuned_ops(cfg, finetune), work))
