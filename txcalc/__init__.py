"""txcalc: exact compute-and-memory accounting for Transformer models.

    >>> import txcalc
    >>> cfg = txcalc.load("llama-3-8b")          # a preset name or a HF config.json path
    >>> txcalc.params(cfg).total
    8030261248
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError, TxcalcError, WorkloadError

__version__ = "0.1.0"
__all__ = ["ModelConfig", "ConfigError", "TxcalcError", "WorkloadError", "load", "params",
           "ParamCounts", "Workload", "count_flops", "TrainingMemory", "plan_train", "plan_infer",
           "__version__"]

#: the library's names beyond load and params, each imported from the package that owns it on
#: first use: ``import txcalc`` stays light, so that the CLI's signal handlers are in place
#: before most of the start-up (txcalc.cli.main)
_LAZY = {"ModelConfig": "model.config", "ParamCounts": "engine.accounting",
         "Workload": "engine.workload", "count_flops": "engine.accounting",
         "TrainingMemory": "engine.memory", "plan_train": "train.planner",
         "plan_infer": "serve.infer"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load(model: str | Path | ModelConfig, head: str | None = None) -> ModelConfig:
    """A ModelConfig from a preset name, a HF config.json path (or its folder), a Hugging
    Face Hub id (``org/name``: its config.json from the local cache or downloaded, txcalc.model.hub),
    or a config.

    ``head`` (a config.json of an encoder): none (the base model, the default), mlm,
    seq_cls, token_cls, discriminator (ELECTRA's), or auto (the class named by
    ``architectures``); see hf.from_hf_dict."""
    if head is not None and not isinstance(model, (str, os.PathLike)):
        raise ConfigError(f"head ({head!r}) applies to a HF config.json, not to a "
                          f"{type(model).__name__}")
    from .model.config import ModelConfig
    if isinstance(model, ModelConfig):
        return model
    from .inputs import InputError, path_text, show
    if not isinstance(model, (str, os.PathLike)):
        raise InputError(f"model ({show(model)}) must be a preset name, a path to a config.json "
                         f"or a ModelConfig, not {type(model).__name__}")
    try:
        text = path_text("model", model)
    except InputError as e:  # a name no file system takes: a config path that cannot be read
        raise ConfigError(str(e)) from None
    try:  # a name the OS refuses (too long a component) is a path: load_hf_config names it
        is_path = text.endswith(".json") or Path(text).exists()
    except (OSError, ValueError):
        is_path = "/" in text
    # a config.json or Hub id keeps the text it was loaded from: its quantization_config and
    # architectures, which serving reads, are the file's (ModelConfig.loaded_from)
    import dataclasses
    if is_path:
        from .model.hf import load_hf_config
        return dataclasses.replace(load_hf_config(text, head), loaded_from=text)
    if "/" in text:  # org/name: a Hugging Face Hub id, read from the cache or downloaded
        from .model.hub import is_hub_id, load_hub
        if is_hub_id(text):
            return dataclasses.replace(load_hub(text, head), loaded_from=text)
    from .model.presets import get_preset
    cfg = get_preset(text)
    if head not in (None, cfg.head):
        raise ConfigError(f"head ({head!r}) applies to a HF config.json; preset {text!r} is "
                          f"built with head {cfg.head!r}")
    return cfg


def params(model: str | Path | ModelConfig) -> ParamCounts:
    """Exact parameter accounting: ``.total``, ``.active``, ``.component_frame()``, ..."""
    from .engine.accounting import count_params
    return count_params(load(model))
