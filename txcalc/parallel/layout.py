"""Layout: how one training job is spread over GPUs, and the checks that make it valid.

    field        | meaning                                                    | group rank order
    -------------|------------------------------------------------------------|-----------------
    tp           | tensor parallel: heads and MLP columns split (Megatron)     | innermost
    cp           | context parallel: the sequence split, ring attention        | next
    dp           | data parallel replicas (ZeRO / FSDP shards over dp * cp)    | next
    pp           | pipeline stages                                             | outermost
    ep           | expert parallel: routed experts split over ep ranks taken   | inside dp
                 |   from the data-parallel group (Megatron-Core's convention) |
    zero         | 0 none, 1 optimizer states, 2 + gradients, 3 + weights (FSDP full shard)
    hybrid_shard | zero 3 shards inside a node and replicates across nodes (FSDP HYBRID_SHARD)
    sp           | sequence parallel: norms/dropout regions split over tp (Korthikanti et al.)
    schedule     | 1f1b or interleaved (with ``virtual`` model chunks per stage)
    micro_batch  | sequences per micro-batch; recompute: none | selective | full | op
    recompute_layers | N > 0: only the first N blocks of each stage recompute (Megatron's
                 |   --recompute-method block --recompute-num-layers N), the rest keep all

GPUs = tp * cp * dp * pp. Ranks are numbered tp fastest, then cp, dp, pp (Megatron-LM's
order), which decides whether a group's ring stays inside a node (see ``parallel.comm``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.config import ModelConfig
from ..errors import TxcalcError
from ..engine.workload import RECOMPUTE  # noqa: F401  (the one list of recompute modes)

SCHEDULES = ("1f1b", "interleaved")
#: partial recompute the planner tries: full recompute of the first N blocks of each stage
#: (Megatron --recompute-method block --recompute-num-layers N), N below the stage's blocks
PARTIAL_LAYERS = (1, 2, 4, 8, 16)
#: the search's recompute axis: (mode index into RECOMPUTE, N, checkpoints offloaded to the
#: host) (N = 0: every block); full recompute with its checkpoints in host memory
RECOMPUTE_POLICIES = tuple((r, 0, False) for r in range(len(RECOMPUTE))) + tuple(
    (RECOMPUTE.index("full"), n, False) for n in PARTIAL_LAYERS) + (
    (RECOMPUTE.index("full"), 0, True),)


class LayoutError(TxcalcError):
    """A parallel layout the model cannot take (a TP degree that does not divide the heads...)."""


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    hybrid_shard: bool = False
    sp: bool = False
    schedule: str = "1f1b"
    virtual: int = 1
    micro_batch: int = 1
    recompute: str = "none"
    #: the first N blocks of each stage recompute (0: every block; Workload.recompute_layers)
    recompute_layers: int = 0
    #: the recomputed blocks' checkpoints (their inputs) live in host memory, crossing PCIe
    #: out in forward and back in backward (full recompute; TrainingMemory's offload
    #: "activations" on one GPU)
    offload_checkpoints: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def short(self) -> str:
        """``tp8 pp16 dp64 z1 sp v2 mb1 sel``: one table cell (degrees of 1 for cp/ep, the
        1F1B schedule and no recompute left out; ``z3h``: ZeRO-3 hybrid shard)."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts.append(f"z{self.zero}" + ("h" if self.hybrid_shard else ""))
        if self.sp:
            parts.append("sp")
        if self.schedule == "interleaved":
            parts.append(f"v{self.virtual}")
        parts.append(f"mb{self.micro_batch}")
        if self.recompute != "none":
            parts.append({"selective": "sel", "full": "full", "op": "opsac"}[self.recompute]
                         + (f"{self.recompute_layers}" if self.recompute_layers else "")
                         + ("+cpu" if self.offload_checkpoints else ""))
        return " ".join(parts)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def joint_rules(tp, pp, dp, cp, ep, sp, virtual, n_blocks: int) -> dict:
    """The rules that join several degrees, each True where it holds. Works on ints (one
    layout: ``check_layout``) and on numpy arrays (the planner's whole grid, ``layout_grid``):

        sp_needs_tp   | sequence parallelism splits inside a TP group: tp > 1
        stages_fit    | pp x virtual chunks <= the model's blocks
        interleaved   | virtual chunks need the interleaved schedule: pp >= 2, virtual >= 2
        ep_divides    | EP ranks are taken from dp x cp (Megatron-Core): ep divides dp x cp
    """
    return {"sp_needs_tp": (sp == 0) | (tp > 1),
            "stages_fit": pp * virtual <= n_blocks,
            "interleaved": (virtual == 1) | ((pp >= 2) & (virtual >= 2)),
            "ep_divides": (dp * cp) % ep == 0}


def check_layout(cfg: ModelConfig, lay: Layout, seq: int) -> None:
    """Raise LayoutError naming every value a layout breaks for this model."""
    problems = []
    for name in ("tp", "pp", "dp", "cp", "ep", "virtual", "micro_batch"):
        v = getattr(lay, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            problems.append(f"{name} ({v!r}) must be a positive integer")
    if problems:
        raise LayoutError("; ".join(problems))
    if lay.zero not in (0, 1, 2, 3):
        problems.append(f"zero ({lay.zero!r}) must be 0, 1, 2 or 3")
    if lay.hybrid_shard and lay.zero != 3:
        problems.append(f"hybrid_shard needs zero 3, not zero {lay.zero}")
    if lay.schedule not in SCHEDULES:
        problems.append(f"schedule ({lay.schedule!r}) must be one of {', '.join(SCHEDULES)}")
    if lay.recompute not in RECOMPUTE:
        problems.append(f"recompute ({lay.recompute!r}) must be one of {', '.join(RECOMPUTE)}")
    n = lay.recompute_layers
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        problems.append(f"recompute_layers ({n!r}) must be a non-negative integer")
    elif n and lay.recompute == "none":
        problems.append(f"recompute_layers ({n}) needs a recompute mode, not 'none'")
    if lay.offload_checkpoints is not False and (lay.offload_checkpoints is not True
                                                 or lay.recompute != "full"):
        problems.append(f"offload_checkpoints ({lay.offload_checkpoints!r}) needs recompute "
                        f"'full', not {lay.recompute!r}")
    if lay.tp > 1:
        if cfg.n_heads % lay.tp:
            problems.append(f"TP degree ({lay.tp}) must divide n_heads ({cfg.n_heads})")
        if not cfg.is_mla and cfg.n_kv_heads % lay.tp:
            problems.append(f"TP degree ({lay.tp}) must divide n_kv_heads ({cfg.n_kv_heads})")
        for name in ("d_ff", "moe_d_ff", "shared_d_ff"):
            width = getattr(cfg, name)
            if width and width % lay.tp:
                problems.append(f"TP degree ({lay.tp}) must divide {name} ({width})")
    blocks = sum(depth for _, depth in cfg.stacks)
    rules = joint_rules(lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, int(lay.sp), lay.virtual, blocks)
    if not rules["sp_needs_tp"]:
        problems.append("sequence parallelism (sp) needs tp > 1")
    if not rules["stages_fit"]:
        problems.append(f"pp ({lay.pp}) x virtual stages ({lay.virtual}) exceeds the "
                        f"{blocks} blocks of {cfg.name}")
    # (the grid derives the schedule from virtual: joint_rules' "interleaved")
    if lay.schedule == "interleaved" and (lay.pp < 2 or lay.virtual < 2):
        problems.append(f"the interleaved schedule needs pp >= 2 and virtual >= 2 (pp {lay.pp}, "
                        f"virtual {lay.virtual})")
    if lay.schedule == "1f1b" and lay.virtual != 1:
        problems.append(f"virtual stages ({lay.virtual}) need the interleaved schedule")
    if seq % lay.cp:
        problems.append(f"CP degree ({lay.cp}) must divide the sequence ({seq})")
    if lay.ep > 1:
        if not cfg.is_moe:
            problems.append(f"expert parallelism (ep {lay.ep}) needs a mixture-of-experts model")
        elif cfg.n_experts % lay.ep:
            problems.append(f"EP degree ({lay.ep}) must divide n_experts ({cfg.n_experts})")
        if not rules["ep_divides"]:
            problems.append(f"EP degree ({lay.ep}) must divide dp x cp ({lay.dp} x {lay.cp})")
    if problems:
        raise LayoutError(f"{cfg.name}: " + "; ".join(problems))
