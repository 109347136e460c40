"""Module walk: the exact fallback for a config.json whose ``model_type`` has no converter.

When ``transformers`` and ``torch`` are installed, the model a user would load is built on the
``meta`` device (no weights are allocated) and its module tree is walked. What this proves, and
what it does not:

    quantity             | status      | how
    ---------------------|-------------|--------------------------------------------------------
    parameters           | exact       | every parameter of the built model, once: a tied weight
                         |             |   (an lm_head sharing the token table) counts at the
                         |             |   first module that owns it, a shared module at its
                         |             |   first path (``named_modules`` order)
    FLOPs, per call      | exact for   | generic rules for modules whose computation is fixed by
                         | ruled       |   their class (table below), per row of one call
                         | modules     |
    FLOPs, whole step    | not counted | how often a module runs and on how many rows (tokens,
                         |             |   patches, frames, once per sequence for a pooler) is in
                         |             |   the model's code, not its module tree; attention
                         |             |   scores (windows, relative positions, sparse patterns)
                         |             |   and any matmul outside the ruled modules likewise
    activations          | not counted | what a step saves depends on the code between modules,
                         |             |   and saved tensors are shared between modules

Per-call FLOP rules (FlopCounterMode's convention, as in ``txcalc.engine.ops``: a multiply-add is 2
FLOPs; bias adds, norms and lookups are elementwise, not counted). A "row" is one input vector
of a Linear (numel(input) / in_features) or one output position of a convolution
(batch x output length/area/volume):

    module class                      | forward FLOPs per row  | backward FLOPs per row
    ----------------------------------|------------------------|-------------------------------
    torch.nn.Linear(i -> o)           | 2 * i * o              | 2 * i * o for the weight
    transformers Conv1D(nx -> nf)     | 2 * nx * nf            |   gradient, + 2 * i * o for
    torch.nn.ConvNd(c_in -> c_out,    | 2 * c_in * c_out *     |   the input gradient when the
      kernel k, groups 1)             |   prod(k)              |   input requires grad (not the
                                      |                        |   first layer on raw inputs)
    torch.nn.Embedding                | 0                      | 0
    torch.nn LayerNorm, RMSNorm,      | 0                      | 0
      GroupNorm, BatchNormNd,         |                        |
      InstanceNormNd                  |                        |

A rule covers the calls of its module: a model that uses a module's weight directly (Mamba's
reference kernels take ``out_proj.weight``) computes outside any call, and that is not counted.
Not ruled, so reported as not counted: grouped convolutions (FlopCounterMode counts their weight
gradient as if ungrouped, so the two conventions disagree), transposed convolutions, and every
other class that holds parameters (model-specific norms such as ``LlamaRMSNorm``, fused expert
stacks, state-space mixers, ...).

The model class: the config's ``architectures[0]`` when transformers has it (the class the
checkpoint was saved from, which ``from_pretrained`` builds), else the causal LM of a decoder's
model_type (what ``AutoModelForCausalLM`` loads: the LM head counted), else ``AutoModel`` (the
base model: no task head; an encoder's default), unless the caller names one (``hf_class``).

``torch`` and ``transformers`` are imported only inside the functions here, so txcalc's core
imports and answers without them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .checks import MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_POSITION, MAX_VOCAB, MAX_WIDTH
from ..errors import ConfigError

METHOD = "module-walk"
#: How to install what the fallback needs (the CPU build of torch first: a bare ``torch``
#: requirement pulls a multi-GB CUDA build).
INSTALL = ("python3 -m pip install torch==2.13.0 && python3 -m pip install 'txcalc[hf]'")
#: Modules one build may register: the largest real models in transformers 5 have under 2,000
#: (experts are fused tensors); 2,048 Llama layers have ~27,000. A build past this budget is
#: stopped (a submodule costs ~0.1 ms even on meta, so a million experts would take minutes).
MAX_MODULES = 2**15


class _TooManyModules(Exception):
    """Raised inside a build that registers more than MAX_MODULES modules."""


class MissingDependency(ConfigError):
    """torch or transformers is not installed, so a model_type without a converter cannot be
    walked."""


@dataclass(frozen=True, slots=True)
class ModuleRow:
    """One module that owns parameters, at its first path in ``named_modules`` order."""

    path: str  #: dotted module path in the HF model ("model.layers.0.self_attn.q_proj")
    cls: str  #: the module's class name
    params: int  #: parameters first seen here (a tied weight counts at its first owner)
    rule: str  #: "linear" | "conv" | "embedding" | "norm" | "" (no rule: FLOPs not counted)
    flops_fwd_per_row: int | None  #: forward FLOPs per row of one call; None: not counted
    tied: tuple[str, ...] = ()  #: "name=first.owner.path" for weights counted elsewhere

    def to_json(self) -> dict[str, Any]:
        out = {"path": self.path, "class": self.cls, "params": self.params,
               "flops_rule": self.rule or None, "flops_fwd_per_row": self.flops_fwd_per_row}
        if self.flops_fwd_per_row is not None:
            # the weight gradient always; the input gradient only when the input requires grad
            out["flops_bwd_per_row"] = {"input_requires_grad": 2 * self.flops_fwd_per_row,
                                        "input_without_grad": self.flops_fwd_per_row}
        if self.tied:
            out["tied"] = list(self.tied)
        return out


@dataclass(frozen=True, slots=True)
class ModuleWalk:
    """The result of a module walk: parameter rows, exact; FLOPs only per call of ruled modules.
    """

    name: str
    model_type: str
    model_class: str  #: the transformers class built
    class_source: str  #: why that class ("architectures[0]", "AutoModel", "--hf-class")
    transformers_version: str
    rows: tuple[ModuleRow, ...]
    buffers: int  #: elements in buffers (not parameters: position tables, masks)

    @property
    def total(self) -> int:
        return sum(r.params for r in self.rows)

    @property
    def ruled_params(self) -> int:
        """Parameters in modules with a FLOP rule."""
        return sum(r.params for r in self.rows if r.rule)

    def not_counted(self) -> list[dict[str, Any]]:
        """Classes holding parameters that have no FLOP rule, with their module count and
        parameters."""
        out: dict[str, list[int]] = {}
        for r in self.rows:
            if not r.rule:
                n = out.setdefault(r.cls, [0, 0])
                n[0] += 1
                n[1] += r.params
        return [{"class": c, "modules": n, "params": p} for c, (n, p) in out.items()]

    def by_pattern(self) -> list[dict[str, Any]]:
        """Rows with layer indices folded (``layers.*.mlp.up_proj``), in first-seen order."""
        out: dict[tuple[str, str, int, int | None], dict[str, Any]] = {}
        for r in self.rows:
            key = (re.sub(r"\.\d+(?=\.|$)", ".*", r.path), r.cls, r.params, r.flops_fwd_per_row)
            row = out.setdefault(key, {"path": key[0], "class": r.cls, "modules": 0,
                                       "params_per_module": r.params, "params": 0,
                                       "flops_fwd_per_row": r.flops_fwd_per_row})
            row["modules"] += 1
            row["params"] += r.params
        return list(out.values())

    def exact(self) -> dict[str, str]:
        """Which quantities are exact: one line each."""
        return {
            "params": "exact: every parameter of the built model, tied weights once",
            "flops": (f"per call only: forward and backward FLOPs per row of the "
                      f"{sum(1 for r in self.rows if r.rule in ('linear', 'conv'))} "
                      "Linear/Conv modules ruled here (flops_fwd_per_row); whole-step FLOPs, "
                      "attention scores and modules without a rule are not counted"),
            "activations": "not counted",
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.name, "model_type": self.model_type, "method": METHOD,
            "model_class": self.model_class, "model_class_source": self.class_source,
            "transformers_version": self.transformers_version,
            "total_params": self.total, "buffer_elements": self.buffers,
            "ruled_params": self.ruled_params, "exact": self.exact(),
            "not_counted": self.not_counted(),
            "modules": [r.to_json() for r in self.rows],
        }


# --- bounds on an unknown config ----------------------------------------------------------------
# An unknown type's field names are not known, so the bounds of txcalc.model.config apply by the
# shape of the name; lists (Swin's ``depths``, ConvNeXt's ``hidden_sizes``) are read per item.
_BOUND_RULES: tuple[tuple[re.Pattern, int, str], ...] = (
    (re.compile(r"(^|_)(layers?|depths?|blocks?)$|^n_layer$|layers_"), MAX_LAYERS, "layers"),
    (re.compile(r"experts"), MAX_EXPERTS, "experts"),
    (re.compile(r"heads?$|^n_head"), MAX_HEADS, "heads"),
    (re.compile(r"vocab_size$"), MAX_VOCAB, "vocab"),
    (re.compile(r"^max_position|window$|^n_positions$|^n_ctx$"), MAX_POSITION, "positions"),
    (re.compile(r"(hidden|intermediate|embed|embedding|ffn|proj|projection|head|inner|model"
                r"|mlp|state|conv)_?(size|sizes|dim|dims)$|^d_(model|ff|inner|kv)$"
                r"|^n_(embd|embed|inner)$|^dim$|^(conv_dim|num_channels)$"), MAX_WIDTH, "width"),
)


#: counts and the common sizes: negative is never a sentinel for these
_COUNT = re.compile(r"^(num_|n_)|^(hidden_size|intermediate_size|vocab_size|d_model|d_ff)$")


def _ints(value: Any) -> Iterator[int]:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _ints(v)


def _bound_problems(raw: dict[str, Any], prefix: str = "") -> tuple[list[str], int]:
    """Fields over txcalc's bounds or negative counts (named), and the most layers one stack
    has (Swin-style ``depths`` lists are summed; other lists under a layers name hold layer
    indices)."""
    problems: list[str] = []
    layers = 0
    for key, value in raw.items():
        if isinstance(value, dict):
            p, lay = _bound_problems(value, f"{prefix}{key}.")
            problems, layers = problems + p, max(layers, lay)
            continue
        low = str(key).lower()
        for pattern, bound, kind in _BOUND_RULES:
            if not pattern.search(low):
                continue
            vals = list(_ints(value))
            if any(v > bound for v in vals):
                problems.append(f"field {prefix}{key!s} ({value!r:.80}) exceeds txcalc's bound "
                                f"of {bound:,} for {kind}")
            elif any(v < 0 for v in vals) and _COUNT.search(low):
                problems.append(f"field {prefix}{key!s} ({value!r:.80}) must not be negative")
            elif vals and kind == "layers" and (low.endswith("depths") or
                                                not isinstance(value, list)):
                layers = max(layers, sum(vals))
            break
    return problems, layers


def check_bounds(raw: dict[str, Any], name: str) -> None:
    """Refuse, before anything is built, a config past txcalc's bounds (all problems in one
    line)."""
    problems, layers = _bound_problems(raw)
    if layers > MAX_LAYERS:
        problems.append(f"{layers} layers in one stack exceed txcalc's bound of {MAX_LAYERS:,}")
    if problems:
        raise ConfigError(f"{name}: " + "; ".join(problems))


# --- building -----------------------------------------------------------------------------------
def _imports(name: str, model_type: Any, supported: str):
    try:
        import torch
        import transformers
    except ImportError as e:
        raise MissingDependency(
            f"{name}: model_type {model_type!r:.80} has no txcalc converter"
            + (f" (supported: {supported})" if supported else "")
            + f"; it is counted by building it with transformers, but "
            f"{e.name or 'torch/transformers'} is not installed: install them with "
            f"{INSTALL}") from None
    return torch, transformers


def _model_class(transformers, raw: dict[str, Any], model_type: str, hf_class: str | None,
                 name: str, cfg_class: type):
    """(class or Auto class, its name, why it was chosen)."""
    from transformers.modeling_utils import PreTrainedModel

    def lookup(cls_name: str):
        try:
            obj = getattr(transformers, cls_name, None)
        except Exception:  # noqa: BLE001  (transformers' lazy import of a broken extra)
            return None
        auto = isinstance(obj, type) and cls_name.startswith("AutoModel") and hasattr(
            obj, "from_config")
        if auto or (isinstance(obj, type) and issubclass(obj, PreTrainedModel)):
            return obj
        return None

    if hf_class is not None:
        obj = lookup(hf_class)
        if obj is None:
            raise ConfigError(f"--hf-class ({hf_class!r:.80}) is not a model class of "
                              f"transformers {transformers.__version__} (e.g. AutoModel, "
                              "AutoModelForCausalLM, LlamaForCausalLM)")
        return obj, hf_class, "--hf-class"
    arch = raw.get("architectures")
    if isinstance(arch, list) and arch and isinstance(arch[0], str):
        obj = lookup(arch[0])
        if obj is not None:
            return obj, arch[0], "architectures[0]"
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
                                                        MODEL_MAPPING_NAMES)

    # a decoder's config without architectures: the causal LM (with its LM head) that
    # AutoModelForCausalLM.from_pretrained loads, not the headless base model. Encoder types
    # (BERT, RoBERTa, ... which also map to a *LMHeadModel/*ForCausalLM used as a decoder)
    # stay the base model unless the config says is_decoder.
    lm_name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    encoder = model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and raw.get("is_decoder") is not True
    lm = lookup(lm_name) if isinstance(lm_name, str) and not encoder else None
    if lm is not None:
        return lm, lm_name, (f"{lm_name}: the causal LM AutoModelForCausalLM loads (the config "
                             "names no architectures[0] that transformers has)")
    if model_type in MODEL_MAPPING_NAMES:
        return transformers.AutoModel, "AutoModel", ("AutoModel: the config names no "
                                                     "architectures[0] that transformers has")
    # a part's config (aimv2_text_model, blip_vision_model): AutoModel does not map it; the
    # base model of its modeling module built for exactly this config class is that part
    found = _base_class_for(cfg_class, PreTrainedModel)
    if found is None:
        raise ConfigError(f"{name}: AutoModel of transformers {transformers.__version__} has no "
                          f"class for model_type {model_type!r:.80}; name the class you load "
                          "with --hf-class")
    return found, found.__name__, (f"{found.__name__}: the model class for "
                                   f"{cfg_class.__name__} (AutoModel does not map it)")


def _base_class_for(cfg_class, base):
    """The model class of ``cfg_class``'s own modeling module whose config_class is exactly
    ``cfg_class``: one without a task head (no "For" in its name) if there is one."""
    import importlib

    module_name = cfg_class.__module__.replace(".configuration_", ".modeling_")
    try:
        module = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001  (no modeling module, or one needing a missing extra)
        return None
    found = sorted((obj for obj in vars(module).values()
                    if isinstance(obj, type) and issubclass(obj, base)
                    and obj.__module__ == module_name
                    and not obj.__name__.endswith("PreTrainedModel")  # the abstract base
                    and getattr(obj, "config_class", None) is cfg_class),
                   key=lambda c: ("For" in c.__name__, c.__name__))
    return found[0] if found else None


def _hf_config(transformers, raw: dict[str, Any], model_type: str, name: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        return None
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "transformers_version",
                                                         "auto_map")}
    try:
        return CONFIG_MAPPING[model_type].from_dict(fields)
    except Exception as e:  # noqa: BLE001  (a bad field can raise anything inside transformers)
        raise ConfigError(f"{name}: transformers cannot read this {model_type} config: "
                          f"{_brief(e)}") from None


def _brief(e: Exception) -> str:
    """An exception from transformers in at most 300 characters (some list every config
    class transformers has)."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" + ("..." if len(text) > 300 else "")


_NORMS = ("LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
          "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm")


def _rule(torch, module) -> tuple[str, int | None]:
    """(rule, forward FLOPs per row) by exact class: subclasses may compute anything."""
    nn = torch.nn
    cls = type(module)
    if cls is nn.Linear:
        return "linear", 2 * module.in_features * module.out_features
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover
        Conv1D = None
    if Conv1D is not None and cls is Conv1D:
        nx, nf = module.weight.shape
        return "linear", 2 * int(nx) * int(nf)
    if cls in (nn.Conv1d, nn.Conv2d, nn.Conv3d) and module.groups == 1:
        k = 1
        for s in module.kernel_size:
            k *= int(s)
        return "conv", 2 * module.in_channels * module.out_channels * k
    if cls is nn.Embedding:
        return "embedding", 0
    if cls in tuple(getattr(nn, n) for n in _NORMS if hasattr(nn, n)):
        return "norm", 0
    return "", None


def walk(model, torch) -> tuple[tuple[ModuleRow, ...], int]:
    """Rows for every module that owns parameters, and the buffer elements (each once)."""
    seen: dict[int, str] = {}
    rows = []
    for path, module in model.named_modules():
        own = list(module.named_parameters(recurse=False, remove_duplicate=False))
        if not own:
            continue
        params, tied = 0, []
        for pname, p in own:
            first = seen.get(id(p))
            if first is None:
                seen[id(p)] = f"{path}.{pname}" if path else pname
                params += p.numel()
            else:
                tied.append(f"{pname}={first}")
        rule, fwd = _rule(torch, module)
        rows.append(ModuleRow(path or "(root)", type(module).__name__, int(params), rule, fwd,
                              tuple(tied)))
    buffers = sum(int(b.numel()) for b in model.buffers())
    return tuple(rows), buffers


@contextmanager
def _quiet():
    """Library code never prints: transformers' log lines and Python warnings are muted while a
    config is read and a model built, then restored."""
    import logging
    import warnings

    hf_logger = logging.getLogger("transformers")
    level = hf_logger.level
    hf_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logger.setLevel(level)


def build(raw: dict[str, Any], name: str, hf_class: str | None = None, supported: str = ""):
    """(model on meta, class name, why that class, transformers version), or None when
    transformers does not know the model_type. Needs torch and transformers; refuses sizes past
    txcalc's bounds before building, and stops a build past MAX_MODULES modules."""
    model_type = raw.get("model_type")
    torch, transformers = _imports(name, model_type, supported)
    registered = [0]

    def budget(module, sub_name, sub):  # noqa: ARG001  (torch's hook signature)
        registered[0] += 1
        if registered[0] > MAX_MODULES:
            raise _TooManyModules

    with _quiet():
        cfg = _hf_config(transformers, raw, model_type, name)
        if cfg is None:
            return None
        check_bounds(raw, name)
        cls, cls_name, source = _model_class(transformers, raw, model_type, hf_class, name,
                                             type(cfg))
        if cls_name == "AutoModel":  # the class AutoModel builds for this config
            from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
            base_name = MODEL_MAPPING_NAMES[model_type]
            cls = getattr(transformers, base_name, cls) if isinstance(base_name, str) else cls
        parent = None if source in ("architectures[0]", "--hf-class") else _parent_lm(
            transformers, type(cfg), cls)
        handle = torch.nn.modules.module.register_module_module_registration_hook(budget)
        try:
            with torch.device("meta"):
                if parent is not None:  # the part inside the model that gives it an LM head
                    parent_cls, parent_cfg_cls = parent
                    model = parent_cls(parent_cfg_cls(text_config=cfg.to_dict()))
                else:
                    model = cls.from_config(cfg) if cls.__name__.startswith("AutoModel") \
                        else cls(cfg)
        except _TooManyModules:
            raise ConfigError(f"{name}: this {model_type} config builds more than "
                              f"{MAX_MODULES:,} modules, txcalc's bound (the largest models in "
                              "transformers have under 2,000)") from None
        except Exception as e:  # noqa: BLE001  (anything the model's __init__ raises)
            hint = "" if hf_class else " (name the class you load with --hf-class)"
            raise ConfigError(f"{name}: transformers cannot build {cls_name} from this "
                              f"{model_type} config{hint}: {_brief(e)}") from None
        finally:
            handle.remove()
    if parent is not None:
        paths = {id(m): p for p, m in model.named_modules()}
        text = next(p for p, m in model.named_modules() if type(m) is cls)
        head = paths[id(model.get_output_embeddings())]
        source = (f"{type(model).__name__}'s {text} ({cls.__name__}) and {head}: the causal LM "
                  f"of this text config (no class of transformers loads it alone with an LM "
                  "head; the vision tower is not counted)")
        return model, f"{type(model).__name__}[{text}, {head}]", source, \
            transformers.__version__, (text, head)
    return model, type(model).__name__, source, transformers.__version__, None


def _parent_lm(transformers, cfg_class: type, part: type):
    """(model class, config class) of the multimodal model whose ``text_config`` is exactly
    ``cfg_class`` and which holds ``part`` with an LM head (Qwen2VLForConditionalGeneration
    for qwen2_vl_text: ``lm_head`` over ``model.language_model``), found in the config's own
    module; None when there is none (the config is not a VLM's text part)."""
    import importlib

    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)
    if "For" in part.__name__ or not isinstance(getattr(part, "config_class", None), type):
        return None
    module = importlib.import_module(cfg_class.__module__)
    for obj in vars(module).values():
        subs = getattr(obj, "sub_configs", None) if isinstance(obj, type) else None
        if not isinstance(subs, dict) or subs.get("text_config") is not cfg_class:
            continue
        mt = getattr(obj, "model_type", None)
        name = (MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(mt)
                or MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(mt))
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        if isinstance(cls, type):
            return cls, obj
    return None


def walk_hf_dict(raw: dict[str, Any], name: str, hf_class: str | None = None,
                 supported: str = "") -> ModuleWalk:
    """A ModuleWalk of the parsed config.json ``raw`` (its model_type has no converter)."""
    model_type = raw.get("model_type")
    built = build(raw, name, hf_class, supported)
    if built is None:
        import transformers
        raise ConfigError(f"{name}: unsupported model_type {model_type!r}: no txcalc converter, "
                          f"and transformers {transformers.__version__} does not know it either"
                          + (f"; supported: {supported}" if supported else ""))
    model, cls_name, source, version, keep = built
    import torch
    rows, buffers = walk(model, torch)
    if keep is not None:  # a VLM's text part and its LM head, not the vision tower
        mods = dict(model.named_modules())
        rows = tuple(r for r in rows if any(r.path == k or r.path.startswith(k + ".")
                                            for k in keep))
        buffers = sum(int(b.numel()) for k in keep for b in mods[k].buffers())
    return ModuleWalk(name=name, model_type=model_type, model_class=cls_name,
                      class_source=source, transformers_version=version, rows=rows,
                      buffers=buffers)


def walk_config(path: str, hf_class: str | None = None) -> ModuleWalk:
    """A ModuleWalk of the config.json at ``path`` (read by txcalc.safeio, as every config),
    whatever its model_type: for a type with a converter it is a cross-check of the converter's
    parameter count."""
    from .hf import CONVERTERS, UnsupportedModelType, load_hf_config

    try:
        cfg = load_hf_config(path)
    except UnsupportedModelType as e:
        return walk_hf_dict(e.raw, e.name, hf_class, supported=", ".join(sorted(CONVERTERS)))
    return walk_hf_dict(_raw(path), cfg.name, hf_class)


def _raw(path: str) -> dict[str, Any]:
    from pathlib import Path

    from ..safeio import check_path, read_json

    p = Path(check_path(path, ConfigError))
    return read_json(p / "config.json" if p.is_dir() else p, ConfigError, infinity=True)
