"""Sums over Op rows: totals, per-component and per-layer-type views. No formula lives here.

The plain-Python views (lists of dicts) serve the CLI, which must not import pandas; the
DataFrame views wrap the same rows for library users.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from .components import model_ops
from .config import ModelConfig
from .ops import Op


def layer_type(cfg: ModelConfig, stack: str, layer: int) -> str:
    """A short label that groups identical blocks: 'decoder dense', 'moe (window 4096)'."""
    parts = [stack] if stack else []
    parts.append("moe" if stack != "encoder" and cfg.is_moe_layer(layer) else "dense")
    if stack != "encoder" and cfg.window(layer):
        parts.append(f"window {cfg.window(layer)}")
    return " ".join(parts)


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
        """One row per kind of block: how many such blocks and the parameters of one."""
        in_blocks = [op for op in self.ops if op.layer >= 0]
        per_layer = _group(in_blocks, lambda o: f"{o.stack}/{o.layer}")
        rows: dict[str, dict] = {}
        for ops in per_layer.values():
            label = layer_type(self.cfg, ops[0].stack, ops[0].layer)
            row = rows.setdefault(label, {"layer_type": label, "layers": 0,
                                          "params_per_layer": sum(o.params_total for o in ops),
                                          "active_per_layer": sum(o.params_active for o in ops),
                                          "first_layer": ops[0].layer})
            row["layers"] += 1
        out = list(rows.values())
        for row in out:
            row["params"] = row["layers"] * row["params_per_layer"]
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
                "by_component": self.by_component(), "by_layer_type": self.by_layer_type()}


def count_params(cfg: ModelConfig) -> ParamCounts:
    return ParamCounts(cfg, tuple(model_ops(cfg)))
