"""``txcalc presets`` and ``txcalc params MODEL``: the answers."""

from __future__ import annotations

from .common import Answer, load_model


def presets() -> Answer:
    """The named models with their parameter counts, and the config.json model types read."""
    from ..engine.accounting import param_totals
    from ..model.hf import supported_types
    from ..model.presets import PRESETS

    rows = []
    for name, cfg in PRESETS.items():
        total, active = param_totals(cfg)  # count_params's sums, each kind of block built once
        rows.append({"name": name, "family": cfg.family, "layers": cfg.n_layers,
                     "d_model": cfg.d_model, "total_params": total, "active_params": active})
    return Answer({"presets": rows, "model_types": supported_types()})


def params(model: str, head: str | None = None, weights: str | None = None,
           hf_class: str | None = None) -> Answer:
    """Exact parameter counts per component and per layer type, and the checkpoint's bytes;
    for a model_type without a converter, the module walk's rows (``parts["walk"]``)."""
    from ..engine.accounting import count_params
    from ..engine.formats import model_checkpoint_bytes, resolve
    from ..errors import ConfigError

    try:
        cfg = load_model(model, head)
    except ConfigError as e:  # txcalc.model.hf (heavy) is imported only where a config.json is read
        from ..model.hf import UnsupportedModelType
        if not isinstance(e, UnsupportedModelType):
            raise
        if weights is not None:
            raise ConfigError(f"--weights ({weights!r:.80}) needs a model_type txcalc has a "
                              f"converter for; {e.name} is counted by a module walk") from None
        return _module_walk(e, hf_class)
    if hf_class is not None:
        raise ConfigError(f"--hf-class ({hf_class!r:.80}) applies only to a model_type txcalc "
                          f"has no converter for; {cfg.name} has one")
    counts = count_params(cfg)
    sch, mtp = resolve(model, weights)
    ckpt = model_checkpoint_bytes(cfg, sch, mtp)
    fmt = sch.name if sch is not None else "bf16"
    return Answer(counts.to_json() | {"weights": fmt, "checkpoint_bytes": ckpt},
                  {"counts": counts, "format": fmt, "mtp": mtp, "checkpoint_bytes": ckpt})


def _module_walk(e, hf_class: str | None) -> Answer:
    """``params`` of a model_type without a converter: the module walk's rows."""
    from ..inputs import text
    from ..model.hf import CONVERTERS
    from ..model.modulewalk import walk_hf_dict

    if hf_class is not None:
        hf_class = text("--hf-class", hf_class, max_len=200)
    w = walk_hf_dict(e.raw, e.name, hf_class, supported=", ".join(sorted(CONVERTERS)))
    return Answer(w.to_json(), {"walk": w})
