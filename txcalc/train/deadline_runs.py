"""Published training runs asked as a user would ask them: "how many GPUs to train this model
on these tokens in D days?", answered by the planner and set against the GPUs the run used.

The runs live in ``txcalc/data/published_deadline_runs.json``; each gives the model (a preset,
or the HF ``config.json`` fields of its published architecture, converted by
``model.hf.from_hf_dict``), the GPU type (a catalog name), the GPUs the run used, the tokens,
the sequence length, the wall-clock days the run took (or days derived from published
GPU-hours / GPUs, as its ``assumptions`` say), the published global batch in sequences (or
null), its source, a verbatim quote and ``split``. In a quote, `` ... `` joins passages of one
source, `` / `` separates the sources in the order ``source`` lists them, and table cells are
written ``| cell | cell |``; numbers not in the quote (a paper's other table, a config) are named
in ``assumptions`` or the model's ``config_source``.


    split | meaning
    ------|------------------------------------------------------------------------------------
    fit   | the planner's defaults may be tuned against these answers later
    test  | never tuned on; the issue-27 acceptance is read on these rows

The split was fixed before any answer was computed: run ids sorted alphabetically, every third
from the first is fit (``fit_rule``).

Each run is asked twice (``answer``):

    column          | plan_train(cfg, gpu, tokens, seq=seq, days=days, global_batch=...)
    ----------------|-----------------------------------------------------------------------
    published batch | the run's published global batch (the planner's default where the
                    |   run published none)
    default batch   | no batch given: the planner's default (about 4M tokens)

and the answer is the plan's ``gpus_for_deadline`` with its best layout's MFU. The error is
answered / used GPUs; a row ``meets`` the issue-27 target when that ratio is within
[0.5, 2] and the answer's MFU is at least 20 %. ``txcalc.report.deadline_table`` renders the
rows into reports/training-validation.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from .published_runs import RunsError

SPLITS = ("fit", "test")
#: issue 27's acceptance on the test rows: answered / used GPUs within these bounds...
RATIO_BOUNDS = (0.5, 2.0)
#: ...at an MFU of at least this
MIN_MFU = 0.20
FIELDS = ("id", "model", "gpu", "gpus_used", "tokens", "seq", "days", "global_batch", "source",
          "quote", "assumptions", "split")
#: the fields the planner's answer depends on (a cached answer's key)
QUESTION = ("model", "gpu", "tokens", "seq", "days", "global_batch")


@dataclass(frozen=True)
class DeadlineRun:
    """One published run (see the module doc); ``model`` is ``{"preset": name}`` or
    ``{"hf_config": {...}, "config_source": "..."}``."""

    id: str
    model: dict = field(hash=False, compare=False)
    gpu: str = ""
    gpus_used: int = 0
    tokens: int = 0
    seq: int = 0
    days: float = 0.0
    global_batch: int | None = None
    source: str = ""
    quote: str = ""
    assumptions: str = ""
    split: str = ""

    @property
    def model_name(self) -> str:
        return self.model.get("preset") or self.id

    def config(self):
        """The run's ModelConfig (a preset, or its config.json fields through from_hf_dict)."""
        if "preset" in self.model:
            from ..model.presets import get_preset
            return get_preset(self.model["preset"])
        from ..model.hf import from_hf_dict
        return from_hf_dict(self.model["hf_config"], self.id)


def runs_path() -> Path:
    return Path(str(resources.files("txcalc") / "data" / "published_deadline_runs.json"))


def _document(path: str | Path | None) -> tuple[str, dict]:
    """(the file's name, its parsed JSON): ``path`` or the package's runs file."""
    from ..safeio import parse_json, read_text
    where = str(path or runs_path())
    return where, parse_json(read_text(path or runs_path(), RunsError), f"cannot read {where}",
                             RunsError)


def load_runs(path: str | Path | None = None) -> list[DeadlineRun]:
    """The runs of ``path`` (default: the package's published_deadline_runs.json), checked:
    every field present, a known split, a catalog GPU, a source and a quote."""
    where, doc = _document(path)
    try:
        raw = list(doc["runs"])
        missing = [f"{r.get('id', '?')}: no {k!r}" for r in raw for k in FIELDS if k not in r]
        if missing:
            raise RunsError(f"{where}: " + "; ".join(missing))
        runs = [DeadlineRun(id=str(r["id"]), model=dict(r["model"]), gpu=str(r["gpu"]),
                            gpus_used=int(r["gpus_used"]), tokens=int(r["tokens"]),
                            seq=int(r["seq"]), days=float(r["days"]),
                            global_batch=None if r["global_batch"] is None
                            else int(r["global_batch"]),
                            source=str(r["source"]), quote=str(r["quote"]),
                            assumptions=str(r["assumptions"]), split=str(r["split"]))
                for r in raw]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise RunsError(f"cannot read {where}: {e.__class__.__name__} {e}") from None
    from ..engine.hardware import get_gpu
    bad = [f"{r.id}: split {r.split!r} (one of {', '.join(SPLITS)})" for r in runs
           if r.split not in SPLITS]
    bad += [f"{r.id}: empty {k}" for r in runs for k in ("source", "quote") if not getattr(r, k)]
    bad += [f"{r.id}: model {r.model!r} (a 'preset' or an 'hf_config')" for r in runs
            if not ("preset" in r.model or "hf_config" in r.model)]
    ids = [r.id for r in runs]
    bad += [f"{i}: given twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for r in runs:
        try:
            get_gpu(r.gpu)
        except Exception as e:  # noqa: BLE001 (any lookup failure names the run)
            bad.append(f"{r.id}: gpu {r.gpu!r} ({e})")
    if bad:
        raise RunsError(f"{where}: " + "; ".join(bad))
    return runs


def load_left_out(path: str | Path | None = None) -> list[dict]:
    """The runs looked for and not made rows, each with why (``left_out`` of the file)."""
    _, doc = _document(path)
    return [{"run": str(x["run"]), "why": str(x["why"])} for x in doc.get("left_out", [])]


def fit_rule(ids) -> dict[str, str]:
    """The split rule, fixed before any answer was computed: ids sorted, every third from the
    first is fit, the rest test."""
    return {i: "fit" if k % 3 == 0 else "test" for k, i in enumerate(sorted(ids))}


@dataclass(frozen=True)
class Answer:
    """The planner's answer to one question: GPUs for the deadline, the best layout on them,
    or why there is none (``error``)."""

    global_batch: int | None  #: the batch asked (None: the planner's default)
    batch_used: int | None = None  #: the batch the plan ran with
    gpus: int | None = None
    mfu: float | None = None
    days: float | None = None
    layout: str = ""
    error: str = ""
    #: the planner's days on exactly the GPUs the run used (its fastest layout there; None
    #: when no layout of the searched grid has that count, or none fits)
    days_on_used: float | None = None


@cache
def _answer(run: DeadlineRun, global_batch: int | None) -> Answer:
    from ..errors import TxcalcError
    from .planner import plan_train
    try:
        plan = plan_train(run.config(), run.gpu, run.tokens, seq=run.seq, days=run.days,
                          global_batch=global_batch, n_rows=1)
    except TxcalcError as e:
        return Answer(global_batch, error=str(e))
    b = plan.best
    on_used = plan.fastest_on([run.gpus_used]).get(run.gpus_used)
    return Answer(global_batch, plan.setting.global_batch, plan.gpus_for_deadline, b.mfu,
                  b.days, b.layout.short(), days_on_used=None if on_used is None
                  else on_used.days)


def answer(run: DeadlineRun, published_batch: bool = True) -> Answer:
    """The planner's answer to ``run``'s question, with the run's published global batch
    (``published_batch``; the default where it published none) or the planner's default.
    Answers are cached per run and batch for the process (each is a full layout search)."""
    return _answer(run, run.global_batch if published_batch else None)


@dataclass(frozen=True)
class Row:
    run: DeadlineRun
    published: Answer  #: with the run's published batch (default where none)
    default: Answer  #: with the planner's default batch

    @staticmethod
    def ratio(a: Answer, run: DeadlineRun) -> float | None:
        """answered / used GPUs."""
        return None if a.gpus is None else a.gpus / run.gpus_used

    @staticmethod
    def meets(a: Answer, run: DeadlineRun) -> bool:
        """Issue 27's target: within RATIO_BOUNDS of the GPUs used at MFU >= MIN_MFU."""
        r = Row.ratio(a, run)
        return r is not None and RATIO_BOUNDS[0] <= r <= RATIO_BOUNDS[1] and a.mfu >= MIN_MFU


# --- the answers' cache -------------------------------------------------------------------------
# A full evaluation is ~2 minutes on one core (DeepSeek-V3's MoE search alone ~90 s), so the
# report keeps the answers with a fingerprint of every input they depend on: the run's fields
# and the source of the packages the planner reads (CODE_PARTS). An answer is reused only when
# both are unchanged, so a cached rendering is the fresh rendering.

#: what the answers depend on: txcalc's model, engine, parallel and train packages, the shared
#: floors, and the GPU catalog
CODE_PARTS = ("model", "engine", "parallel", "train", "units.py", "inputs.py", "errors.py",
              "safeio.py", "data/gpus.csv")


def code_fingerprint() -> str:
    """sha256 over CODE_PARTS' files (paths and bytes, in sorted order)."""
    import hashlib
    root = Path(str(resources.files("txcalc")))
    h = hashlib.sha256()
    for part in CODE_PARTS:
        p = root / part
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def run_key(run: DeadlineRun, fingerprint: str) -> str:
    """sha256 of the run's fields and the code fingerprint: a cached answer's validity."""
    import hashlib
    import json
    fields = {k: getattr(run, k) for k in QUESTION}
    return hashlib.sha256((json.dumps(fields, sort_keys=True) + fingerprint).encode()).hexdigest()


def _answer_json(a: Answer) -> dict:
    return {k: getattr(a, k) for k in ("global_batch", "batch_used", "gpus", "mfu", "days",
                                       "layout", "error", "days_on_used")}


def evaluate(runs=None, cache: dict | None = None) -> tuple[list[Row], dict]:
    """Every run's answers, with and without its published batch, and the cache to keep:
    ``{run id: {"key": run_key, "published": {...}, "default": {...}}}``. An entry of
    ``cache`` whose key matches is used instead of a search."""
    runs = load_runs() if runs is None else runs
    cache = cache or {}
    fp = code_fingerprint()
    rows, kept = [], {}
    for r in runs:
        key = run_key(r, fp)
        hit = cache.get(r.id)
        if hit and hit.get("key") == key:
            pub, dfl = Answer(**hit["published"]), Answer(**hit["default"])
        else:
            pub, dfl = answer(r, True), answer(r, False)
        rows.append(Row(r, pub, dfl))
        kept[r.id] = {"key": key, "published": _answer_json(pub), "default": _answer_json(dfl)}
    return rows, kept


def summary(rows: list[Row], split: str, published_batch: bool = True) -> dict:
    """How many of a split's rows meet the target, and the spread of their ratios."""
    sel = [r for r in rows if r.run.split == split]
    ans = [(r.published if published_batch else r.default, r.run) for r in sel]
    ratios = sorted(x for x in (Row.ratio(a, run) for a, run in ans) if x is not None)
    return {"rows": len(sel), "answered": len(ratios),
            "meets": sum(Row.meets(a, run) for a, run in ans),
            "min_ratio": ratios[0] if ratios else None,
            "max_ratio": ratios[-1] if ratios else None}
