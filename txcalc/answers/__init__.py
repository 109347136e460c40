"""The answer layer: one function per command, returning the dict its ``--json`` prints.

    function                  | command            | module
    --------------------------|--------------------|---------------------
    presets, params           | txcalc presets     | answers.params
    flops, memory             | txcalc flops       | answers.costs
    fit                       | txcalc fit         | answers.fit
    plan_train                | txcalc plan train  | answers.plan
    plan_infer                | txcalc plan infer  | answers.plan

Each takes the command's options as plain Python values (the names of its flags: ``--kv-dtype``
is ``kv_dtype``), checks them as the command always has (txcalc.inputs), turns the model name
into a ModelConfig once (``txcalc.load``) and the GPU into a catalog row once, and hands the
engine, train and serve functions those objects. It returns an ``Answer``: ``json``, exactly
what ``txcalc COMMAND ... --json`` prints, and ``parts``, the objects the CLI's tables read.
The CLI (txcalc.cli), the what-if page (txcalc.web) and compare all call these; nothing here
prints. Imports stay inside the functions: a command loads only what it uses.
"""

from __future__ import annotations

from .common import Answer, json_text

#: answer function name -> its module (txcalc.answers.<module>); ``get`` imports it
FUNCTIONS = {"presets": "params", "params": "params", "flops": "costs", "memory": "costs",
             "fit": "fit", "plan_train": "plan", "plan_infer": "plan"}

__all__ = ["Answer", "FUNCTIONS", "get", "json_text"]


def get(name: str):
    """The answer function ``name`` (a key of FUNCTIONS)."""
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{FUNCTIONS[name]}"), name)


def __getattr__(name: str):
    """``txcalc.answers.memory`` and the others, imported on first use."""
    if name in FUNCTIONS:
        return get(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
