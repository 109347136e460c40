"""Hugging Face ``config.json`` -> ModelConfig. The only package that knows HF field names.

Each supported ``model_type`` has one record in ``registry.MODELS``: its converter (in the
module of its family: llama, qwen, gemma, moe, deepseek, gpt, encoders, seq2seq, hybrids,
vision), its sliding-window rule, its dropouts, its field aliases, its encoder heads and its
vision sub-configs. A field missing from the file takes the default of the matching
``transformers`` configuration class (as of transformers 5.x), so a trimmed config.json means
what it means to HF. The test suite draws random configs per model_type and checks parameter
counts against the HF model built on the meta device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..checks import _show
from ..config import ModelConfig
from ...errors import ConfigError, TxcalcError
from ...safeio import check_path, parse_json, read_text, shown
from .encoders import ENCODER_HEADS
from .fields import ACT, Fields, apply_window_rule, read_dropouts, resolve_aliases
from .registry import MODELS
from .vision import vision_fields

#: model_type -> converter (the registry's, for callers that list or run converters)
CONVERTERS = {t: m.convert for t, m in MODELS.items()}

__all__ = ["CONVERTERS", "ENCODER_HEADS", "MODELS", "UnsupportedModelType", "closest_types",
           "from_hf_dict", "load_hf_config", "supported_types"]


def supported_types() -> list[str]:
    """Every ``model_type`` txcalc reads, sorted: the one list ``txcalc presets`` and the
    README show."""
    return sorted(MODELS)


def closest_types(raw: dict[str, Any], n: int = 3) -> tuple[list[str], list[str]]:
    """Supported types closest to a config of an unsupported ``model_type``: by the name
    (difflib ratio; a supported name inside it or it inside one counts as close), and by the
    config's fields (the converters that read the most of the fields it sets)."""
    import difflib

    model_type = raw.get("model_type")
    by_name: list[str] = []
    if isinstance(model_type, str) and model_type:
        key = model_type.lower()
        base = key.replace("-", "_")
        scored = sorted(MODELS, key=lambda t: (
            -(t in base or base in t or t.split("_")[0] == base.split("_")[0]),
            -difflib.SequenceMatcher(None, base, t).ratio(), t))
        by_name = [t for t in scored if t in base or base in t
                   or t.split("_")[0] == base.split("_")[0]
                   or difflib.SequenceMatcher(None, base, t).ratio() >= 0.6][:n]
    keys = {k for k, v in raw.items() if v is not None and k not in _GENERIC_KEYS}
    scores = []
    for t, model in MODELS.items():
        f = _Probe(resolve_aliases(model.aliases, raw), "")
        f.model, f.models = model, MODELS
        try:
            model.convert(f)
        except Exception:  # a partial read still says which fields the type knows
            pass
        hits = len(keys & f.read)
        if hits:  # most fields in common first, then the type that reads fewest others
            scores.append((-hits, -hits / len(f.read), t))
    by_keys = [t for *_, t in sorted(scores)][:n]
    return by_name, by_keys


class _Probe(Fields):
    """A lenient reader for closest_types: missing or odd fields read as harmless values, so
    that a converter runs to its end and shows every field it knows."""

    def int(self, key: str, default: int | None = None) -> int:
        self.read.add(key)
        v = self.raw.get(key, default)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 2

    def bool(self, key: str, default: bool) -> bool:
        self.read.add(key)
        v = self.raw.get(key, default)
        return v if isinstance(v, bool) else default

    def act(self, key: str, default: str) -> str:
        self.read.add(key)
        return ACT.get(self.raw.get(key, default), "silu")


#: fields every config.json may carry: they say nothing about the architecture
_GENERIC_KEYS = frozenset({"model_type", "architectures", "torch_dtype", "dtype",
                           "transformers_version", "_name_or_path", "bos_token_id",
                           "eos_token_id", "pad_token_id", "use_cache", "initializer_range"})


def _closest_hint(raw: dict[str, Any]) -> str:
    by_name, by_keys = closest_types(raw)
    parts = ([f"by name {', '.join(by_name)}"] if by_name else []) + (
        [f"by its fields {', '.join(by_keys)}"] if by_keys else [])
    return f"closest supported: {'; '.join(parts)}; " if parts else ""


class UnsupportedModelType(ConfigError):
    """A config.json whose model_type has no converter. ``txcalc params`` counts it by a module
    walk (txcalc.model.modulewalk); ``raw`` and ``name`` are kept for it."""

    def __init__(self, raw: dict[str, Any], name: str):
        self.raw, self.name = raw, name
        super().__init__(
            f"{name}: unsupported model_type {raw['model_type']!r:.80} for this command: txcalc "
            f"has no converter for it, so only `txcalc params` answers (parameters exact, and "
            f"the FLOPs per call of its Linear and convolution modules, by a module walk of the "
            f"transformers model; txcalc.model.modulewalk.walk_config from Python); "
            f"{_closest_hint(raw)}supported: {', '.join(sorted(MODELS))}")


def from_hf_dict(raw: Any, name: str = "config.json", head: str | None = None) -> ModelConfig:
    """A ModelConfig from the parsed contents of a HF config.json.

    ``head`` (encoders): None or "none" builds the base model as ``AutoModel`` does (with its
    pooler where HF builds one); "mlm", "seq_cls", "token_cls" the ``*ForMaskedLM``,
    ``*ForSequenceClassification``, ``*ForTokenClassification`` class; "auto" the class named
    by ``architectures[0]``."""
    if head is not None and head not in ENCODER_HEADS:
        raise ConfigError(f"head ({_show(head)}) must be one of {', '.join(ENCODER_HEADS)}")
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: expected a JSON object, got {type(raw).__name__}")
    model_type = raw.get("model_type")
    if model_type is None:
        raise ConfigError(f"{name}: no 'model_type' field; {_closest_hint(raw)}supported: "
                          f"{', '.join(sorted(MODELS))}")
    if not isinstance(model_type, str):
        raise ConfigError(f"{name}: unsupported model_type {_show(model_type)}; "
                          f"{_closest_hint(raw)}supported: {', '.join(sorted(MODELS))}")
    if model_type not in MODELS:
        raise UnsupportedModelType(raw, name)
    model = MODELS[model_type]
    f = Fields(resolve_aliases(model.aliases, raw), name)
    f.head, f.model, f.models = head, model, MODELS
    if head not in (None, "none", "auto") and model.heads is None:
        raise ConfigError(f"{name}: head {head!r} is for encoder models; {model_type} has none")
    try:
        fields = model.convert(f)
        fields.update(apply_window_rule(f, fields["n_layers"], model.window))
        fields.update(read_dropouts(f, model.dropout))
        fields.update(vision_fields(f, model_type, model.vision, fields))
    except TxcalcError as e:
        if f.problems:
            raise ConfigError("; ".join([str(e)] + f.problems)) from None
        raise
    except (TypeError, ValueError, KeyError, ZeroDivisionError) as e:  # odd types in odd fields
        if f.problems:
            raise ConfigError(f"{name}: " + "; ".join(f.problems)) from None
        raise ConfigError(f"{name}: cannot read {model_type} config: {e}") from None
    if f.problems:
        raise ConfigError(f"{name}: " + "; ".join(f.problems))
    source = fields.pop("source", f"HF config.json ({model_type})")
    return ModelConfig(name=name, source=source, **fields)


def load_hf_config(path: str | Path, head: str | None = None) -> ModelConfig:
    """Read a HF config.json (or a directory holding one) into a ModelConfig.

    The file is read by ``safeio`` (a regular file under its size cap, strict JSON with depth
    and integer-size limits): a FIFO, a device or a huge file is refused, never read."""
    p = Path(check_path(path, ConfigError))
    if p.is_dir():
        p = p / "config.json"
    text = read_text(p, ConfigError)
    if not text.strip():
        raise ConfigError(f"{shown(p)}: empty file, expected a JSON object")
    raw = parse_json(text, shown(p), ConfigError, infinity=True)
    if not isinstance(raw, dict):
        raise ConfigError(f"{shown(p)}: expected a JSON object, got {type(raw).__name__}")
    default = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    name = raw.get("_name_or_path")
    return from_hf_dict(raw, name if isinstance(name, str) and name else default, head)
