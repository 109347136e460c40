"""ReportRequest: the question a capacity report answers, and the command that asks it.

Every field maps to one option of ``txcalc report`` (``batch`` -> ``--batch``); ``argv()`` gives
the shortest command that reproduces the request, which the report prints as its provenance.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

from ..errors import WorkloadError


@dataclass(frozen=True)
class ReportRequest:
    """Training question (default) or serving question (``inference=True``)."""

    model: str | None = None  #: preset name or HF config.json path (None with ``params``)
    params: str | None = None  #: only a parameter count (80e9, 70B): model states only
    inference: bool = False  #: a serving report (weights + KV cache) instead of training
    gpu: str | None = None  #: GPU name in the catalog (h100, h200, ...)
    gpu_gb: float | None = None  #: GPU memory in GB (1e9); overrides the catalog
    gpu_file: str | None = None  #: CSV of extra GPUs (the catalog's columns)
    #: fp32 | bf16-mixed | fp16-mixed | bf16; None: bf16-mixed, or fp16-mixed on a GPU without
    #: bf16 tensor cores (T4, V100), as memory and fit take it (answers.common.half_precision),
    #: resolved when the request is made and stated in ``setup``'s assumed
    precision: str | None = None
    #: adamw | adam | adam8bit | paged-adam8bit | sgd | adafactor | none (None: adamw; fine-tuning: the
    #: recipe's, ``setup``)
    optimizer: str | None = None
    batch: int = 1  #: micro-batch (sequences) of the single-GPU figures
    seq: int | None = None  #: training sequence length (None: the planner's default_seq)
    src_seq: int = 0  #: encoder length of encoder-decoder models (0 = seq)
    attn: str = "flash"  #: attention kernel: eager | sdpa | flash
    #: activation recompute of the single-GPU figures (None: "none"; fine-tuning: "full",
    #: gradient checkpointing as the recipes run it, answers.common.default_recompute)
    recompute: str | None = None
    tokens: str | None = None  #: training token budget (15T, 1e12)
    days: float | None = None  #: deadline in days (planner)
    max_gpus: int | None = None  #: most GPUs allowed (planner)
    global_batch: int | None = None  #: global batch in sequences (planner)
    price: float | None = None  #: price of one GPU-hour, for the cost
    context: int = 0  #: serving: tokens per sequence in the KV cache (0 = seq)
    concurrency: int = 1  #: serving: sequences served at once
    kv_dtype: str = "bf16"  #: serving: KV cache dtype
    tokens_per_s: float | None = None  #: serving: required decode throughput (planner)
    #: serving: prompt and output tokens per request of the latency-against-load section
    #: (``serving_report``: TTFT/ITL against load, the layouts' Pareto front); 0: none
    input_len: int = 0
    output_len: int = 0
    weights: str | None = None  #: serving: weight format (formats.scheme; None: the
    #: config.json's quantization_config, else the precision's dtype)
    #: serving: the engine whose rule sizes the KV cache of the Launch files (plan infer's
    #: --engine: vllm, its older releases, trtllm; None: vLLM's)
    engine: str | None = None
    finetune: str = "full"  #: training: full | lora | qlora | dora | freeze (txcalc.engine.finetune)
    lora_rank: int = 16  #: adapters' rank
    lora_alpha: float | None = None  #: adapters' alpha (None: the rank)
    lora_targets: str = "all-linear"  #: all-linear | attn | mlp | module names
    lora_dropout: float = 0.0  #: adapters' dropout
    trainable: str = "head"  #: freeze: what trains (last:N, head, norms, embeddings)
    base_format: str = "nf4"  #: qlora: the frozen base's format
    #: training: the LM loss, full | chunked[:N] | fused-linear (lm_loss); None: full, or
    #: the recipe's when fine-tuning
    loss: str | None = None
    #: fine-tuning: the recipe whose code path is modelled (engine.recipes; None: the default
    #: recipe when fine-tuning): its fp32 upcasts, optimizer and kernel, loss, checkpoints'
    #: place and allocator slack, as memory and fit take it (answers.common.apply_recipe)
    recipe: str | None = None
    compare: str | None = None  #: KEY=V1,V2,...: a section with these options side by side
    #: (txcalc.report.compare: the command of the report's answer run once per value)

    @property
    def ft(self):
        """The ``finetune.Finetune`` of the request (None: full training)."""
        from ..engine.finetune import finetune_from_options
        return finetune_from_options(self.finetune, self.lora_rank, self.lora_alpha, self.lora_targets,
                             self.lora_dropout, self.trainable, self.base_format)

    @property
    def weights_format(self) -> str | None:
        """The serving weight format's name, or None for the precision's dtype."""
        from ..engine.formats import resolve
        sch, _ = resolve(self.model, self.weights) if self.model is not None else (None, 0)
        return sch.name if sch is not None else None

    def __post_init__(self) -> None:
        if (self.model is None) == (self.params is None):
            raise WorkloadError("give either MODEL or --params N, not both or neither")
        from ..answers.common import half_precision
        # (half_precision checks --gpu and --gpu-file as the CLI does, in one line)
        default, said = half_precision(None, self.gpu, self.gpu_file)
        if self.inference:  # the same default, in serving's words (weights and KV in fp16)
            said = half_precision(None, self.gpu, self.gpu_file, serving=True)[1]
        if self.precision is None:
            object.__setattr__(self, "precision", default)
        else:
            said = []
        # not fields: the precision a request without one takes on its GPU (argv omits it
        # then, as before) and, when this request took it, the words saying so (``setup``)
        object.__setattr__(self, "_default_precision", default)
        object.__setattr__(self, "_precision_said", said)
        self._check_values()
        if (self.input_len == 0) != (self.output_len == 0):
            raise WorkloadError(f"give both --input-len ({self.input_len}) and --output-len "
                                f"({self.output_len}), or neither")
        if self.input_len and not self.inference:
            raise WorkloadError(f"--input-len ({self.input_len}) and --output-len "
                                f"({self.output_len}) apply to --inference reports")
        if self.weights is not None:
            if not self.inference:
                raise WorkloadError(f"--weights ({self.weights!r:.60}) applies to --inference "
                                    "reports")
            from ..engine.formats import scheme
            scheme(self.weights)  # an unknown format fails here, before any work
        if self.engine is not None:
            if not self.inference:
                raise WorkloadError(f"--engine ({self.engine!r:.60}) applies to --inference "
                                    "reports")
            from ..serve.kv import kv_options
            kv_options(engine=self.engine)  # an unknown engine fails here, naming it
        if self.finetune != "full" and self.inference:
            raise WorkloadError(f"--finetune ({self.finetune!r:.60}) applies to training "
                                "reports, not --inference")
        if self.compare is not None:
            from .compare import compare_options
            compare_options(self.compare)  # a malformed --compare fails here, before any work
        if self.loss not in (None, "full"):
            from ..engine.workload import loss_chunks
            loss_chunks(self.loss)  # a malformed loss fails here, naming it
            if self.inference or self.model is None:
                raise WorkloadError(f"--loss ({self.loss!r:.60}) applies to training reports "
                                    "of a model (MODEL, not --params or --inference)")
        if self.ft is not None and self.model is None:
            raise WorkloadError(f"--finetune ({self.finetune!r:.60}) needs MODEL: adapters "
                                "and frozen parts depend on its modules")
        if self.recipe is not None and self.ft is None:
            # a recipe's full config (torchtune's: optimizer in backward, paged states) is
            # memory's and fit's to answer; a report's recipe is a fine-tuning one
            raise WorkloadError(f"--recipe ({self.recipe!r:.60}) applies to fine-tuning reports "
                                "(--finetune lora, qlora, dora or freeze), not to full training: "
                                "txcalc memory and fit take a recipe's full config")
        if self.recipe is not None:  # an unknown one fails here, naming it
            from ..answers.common import apply_recipe
            apply_recipe(self.ft, self.recipe, None, None, None)

    @property
    def setup(self) -> dict:
        """The training setting of the single-GPU figures, as ``memory`` and ``fit`` resolve
        the same options (answers.common): {recompute, optimizer, loss, offload, finetune
        (with the recipe's fp32 upcast), optimizer_kernel, reserved_slack (the allocator's,
        engine.device), recipe (its JSON, None for full training), assumed (the defaults
        taken, in the answers' words)}. Full training: recompute none, adamw, the full loss."""
        from ..answers.common import apply_recipe, default_recompute
        recompute, assumed = default_recompute(self.recompute, self.finetune)
        rec = apply_recipe(self.ft, self.recipe, self.optimizer, self.loss, None)
        return rec | {"recompute": recompute,
                      "assumed": self.precision_assumed + assumed + rec["assumed"]}

    def replaced(self, **changes) -> ReportRequest:
        """dataclasses.replace, keeping the words of a precision this request took (the copy
        is given the precision the original resolved, which the copy alone would read as the
        user's)."""
        new = dataclasses.replace(self, **changes)
        if "precision" not in changes:
            object.__setattr__(new, "_precision_said", self._precision_said)
        return new

    @property
    def precision_assumed(self) -> list[str]:
        """The precision this request took because none was given, in words (empty when the
        user gave one, or when it is the plain bf16 default)."""
        return list(self._precision_said)

    def _check_values(self) -> None:
        """Each field's type and bounds, checked as the CLI checks its option (answers.checks:
        the same one-line InputError naming the option and the value): a library caller's
        ``gpu_gb=inf`` or ``days="3"`` is refused here, not met as a TypeError or an
        infinite figure deep in the report."""
        from .. import inputs as I
        from ..answers.checks import checked
        if not isinstance(self.inference, bool):
            raise I.InputError(f"inference ({I.show(self.inference)}) must be True or False")
        for name in ("model", "weights", "compare", "engine", "recipe", "loss"):
            I.text(f"--{name}" if name != "model" else "MODEL", getattr(self, name), none=True)
        for name in ("finetune", "lora_targets", "trainable", "base_format"):
            I.text("--" + name.replace("_", "-"), getattr(self, name))
        I.integer("--seq", self.seq, 1, I.MAX_SEQ, none=True)
        for name in ("src_seq", "context", "input_len", "output_len"):
            I.integer("--" + name.replace("_", "-"), getattr(self, name), 0, I.MAX_SEQ)
        I.integer("--lora-rank", self.lora_rank, 1, 2**20)
        I.number("--lora-alpha", self.lora_alpha, 0, 1e6, none=True)
        I.number("--lora-dropout", self.lora_dropout, 0, 1, lo_open=False, hi_open=True)
        checked(**{name: getattr(self, name) for name in (
            "batch", "concurrency", "global_batch", "max_gpus", "days", "price", "tokens_per_s",
            "gpu_gb", "attn", "recompute", "precision", "optimizer", "kv_dtype", "tokens",
            "params", "gpu", "gpu_file")})

    @property
    def serve_context(self) -> int:
        """--context, else a request's input + output, else the sequence."""
        return self.context or (self.input_len + self.output_len) or self.seq

    @property
    def serve_precision(self) -> str:
        """The precision plan infer serves the weights in: bf16-mixed -> bf16, fp16-mixed ->
        fp16 (answers.common.SERVING_PRECISION), any other as given."""
        from ..answers.common import SERVING_PRECISION
        return SERVING_PRECISION.get(self.precision, self.precision)

    def argv(self) -> list[str]:
        """The options of ``txcalc report`` that reproduce this request (defaults omitted)."""
        out = [self.model] if self.model is not None else []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "model" or v == f.default or (f.name == "precision"
                                                       and v == self._default_precision):
                continue
            flag = "--" + f.name.replace("_", "-")
            out += [flag] if v is True else [flag, f"{v:g}" if isinstance(v, float) else str(v)]
        return out

    def command(self, out_dir: str) -> str:
        return shlex.join(["txcalc", "report", *self.argv(), "-o", str(out_dir)])
