"""Reading validation reports (``txcalc validate``'s JSON in reports/validation/) into
predicted/measured rows, and the report's "Predicted against measured" section."""

from __future__ import annotations

from ..units import error_pct
from .sections import plot, section, table

MAX_VALIDATION_ROWS = 40


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _pairs(obj: dict) -> list[tuple[str, object, object]]:
    """(quantity suffix, predicted, measured) of a dict: ``predicted``/``measured``,
    ``predicted_x``/``measured_x`` or ``x_predicted``/``x_measured``."""
    out = []
    for k, v in obj.items():
        if k.startswith("predicted"):
            q, m = k[len("predicted"):].strip("_"), obj.get("measured" + k[len("predicted"):])
        elif k.endswith("_predicted"):
            q, m = k[:-len("_predicted")], obj.get(k[:-len("predicted")] + "measured")
        else:
            continue
        if _number(v) and _number(m):
            out.append((q, v, m))
    return out


def _zip_trees(pred: dict, meas: dict, path: list[str]) -> list[dict]:
    """Rows from parallel ``predicted``/``measured`` trees (memory by phase and category:
    ``predicted.after_forward.act`` against ``measured.after_forward.act``)."""
    rows = []
    for k, p in pred.items():
        m = meas.get(k)
        if isinstance(p, dict) and isinstance(m, dict):
            rows += _zip_trees(p, m, path + [str(k)])
        elif _number(p) and _number(m):
            rows.append({"label": " ".join(path + [str(k)]), "quantity": "bytes by phase",
                         "predicted": p, "measured": m})
    return rows


def validation_rows(obj, where: str = "") -> list[dict]:
    """Every predicted/measured pair in a validation report, wherever it sits (``txcalc
    validate`` writes totals, components, layers and modules). A row is labelled by its dict's
    names (component, module, layer) and the quantity: the key suffix, else the nearest key
    of the path (``modules.params[3]`` -> params)."""
    rows: list[dict] = []
    if isinstance(obj, dict):
        names = [f"layer {v}" if k == "layer" and str(v).isdigit() else str(v)
                 for k, v in obj.items() if isinstance(v, str)
                 and k not in ("model", "device", "unit", "dtype", "precision", "torch",
                               "python", "attn_impl", "recompute")]
        context = where.split("[")[0].split(".")
        for q, pred, meas in _pairs(obj):
            quantity = q or context[-1] or "value"
            label = " ".join(names) if names else ".".join(c for c in context if c)
            rows.append({"label": f"{label} {quantity}" if names or q else label,
                         "quantity": quantity, "predicted": pred, "measured": meas})
        if isinstance(obj.get("predicted"), dict) and isinstance(obj.get("measured"), dict):
            rows += _zip_trees(obj["predicted"], obj["measured"], [])
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and not (
                    k in ("predicted", "measured") and isinstance(obj.get("predicted"), dict)):
                rows += validation_rows(v, f"{where}.{k}" if where else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            rows += validation_rows(v, f"{where}[{i}]")
    return rows


def find_validation(name: str, validation_dir) -> tuple[str, dict, list[dict]] | None:
    """The first validation report (``<dir>/*.json``, sorted) made for model ``name``."""
    from pathlib import Path

    from ..errors import TxcalcError
    from ..safeio import read_json

    if validation_dir is None or not Path(validation_dir).is_dir():
        return None
    for p in sorted(Path(validation_dir).glob("*.json")):
        try:  # safeio: regular files under the size cap, strict JSON (a NaN file is skipped)
            raw = read_json(p)
        except TxcalcError:
            continue
        if isinstance(raw, dict) and (raw.get("model") == name
                                      or p.stem.startswith(f"{name}-")):
            rows = validation_rows(raw)
            if rows:
                return p.name, raw, rows
    return None


def validation_section(data: dict, name: str, validation_dir) -> dict:
    where = str(validation_dir) if validation_dir else "reports/validation"
    found = find_validation(name, validation_dir)
    if found is None:
        return section("validation", "Predicted against measured",
                       [f"No validation report for {name} in {where}/ (run `txcalc validate "
                        f"{name}` to make one)."])
    file, raw, rows = found
    setup = ", ".join(f"{k} {raw[k]}" for k in ("device", "batch", "seq", "attn_impl",
                                                "recompute", "precision")
                      if isinstance(raw.get(k), (str, int)) and not isinstance(raw[k], bool))
    for r in rows:
        r["error_pct"] = (error_pct(r["predicted"], r["measured"])
                          if r["measured"] else (0.0 if r["predicted"] == 0 else None))
    by_q: dict[str, dict] = {}
    for r in rows:
        q = by_q.setdefault(r["quantity"], {"quantity": r["quantity"], "pairs": 0, "exact": 0,
                                            "max_abs_error_pct": 0.0})
        q["pairs"] += 1
        q["exact"] += r["predicted"] == r["measured"]
        if r["error_pct"] is not None:
            q["max_abs_error_pct"] = max(q["max_abs_error_pct"], abs(r["error_pct"]))
    # stable sort: ties (all exact) keep the report's order, totals and components first
    shown = sorted(rows, key=lambda r: -abs(r["error_pct"] or 0))[:MAX_VALIDATION_ROWS]
    data["validation"] = {"file": file, "setup": setup, "rows": len(rows),
                          "exact": sum(q["exact"] for q in by_q.values()),
                          "by_quantity": list(by_q.values()), "shown": shown}
    v = data["validation"]
    kinds = _validated_kinds(list(by_q), raw)
    v["validated"], v["not_validated"] = kinds
    return section("validation", "Predicted against measured",
                   [f"From {where}/{file}" + (f" ({setup})" if setup else "") + ": "
                    f"{v['rows']:,} predicted/measured pairs, {v['exact']:,} exactly equal "
                    "(error = (predicted - measured) / measured).",
                    f"What this validates: {', '.join(kinds[0])}. What it does not: "
                    f"{', '.join(kinds[1])}; those are the model's estimates, checked "
                    "elsewhere or not at all (see the assumptions below)."],
                   [table("By quantity", ["quantity", "pairs", "exact", "largest |error|"],
                          [[q["quantity"], f"{q['pairs']:,}", f"{q['exact']:,}",
                            f"{q['max_abs_error_pct']:.2f}%"] for q in v["by_quantity"]]),
                    table(f"The {len(shown)} largest errors" if v["exact"] < v["rows"]
                          else f"Every pair is exact; the first {len(shown)} rows",
                          ["row", "predicted", "measured", "error"],
                          [[r["label"], f"{r['predicted']:,}", f"{r['measured']:,}",
                            "n/a" if r["error_pct"] is None else f"{r['error_pct']:+.2f}%"]
                           for r in shown])],
                   [plot("validation.png", "validation", "Predicted against measured",
                         "Predicted against measured values, one point per row")])


def _kind(q: str) -> str:
    """What a quantity of a validation file measures, by its name."""
    if "params" in q:
        return "parameter counts"
    if "flops" in q:
        return "FLOP counts"
    if "saved" in q:
        return "bytes saved for backward"
    if q.endswith("_s") and not q.endswith("_step") or "time" in q:
        return "times"
    return "tensor bytes by phase of the step (forward, backward, optimizer step, peaks)"


def _validated_kinds(quantities: list[str], raw: dict) -> tuple[list[str], list[str]]:
    """(what the pairs of a validation file measured, what a capacity plan also needs and
    they did not): counts on a ``meta``/``cpu`` device never validate time or GPU memory."""
    seen = []
    for q in quantities:
        word = _kind(q)
        if word not in seen:
            seen.append(word)
    on_gpu = str(raw.get("device", "")).startswith("cuda")
    timed = any(w == "times" for w in seen)
    missing = []
    if not timed:
        missing.append("step and kernel times (MFU, days, latency)")
    if not on_gpu:
        missing.append("the GPU memory a real run allocates (CUDA context, caching allocator, "
                       "fragmentation, communication buffers)")
    if on_gpu and "bytes by phase" not in quantities:
        missing.append("the allocator's peak memory by phase")
    return (seen or ["nothing"]), (missing or ["nothing listed"])
