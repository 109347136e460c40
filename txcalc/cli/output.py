"""Shared CLI output: JSON for scripts, rich tables for people, unit formatting at the edge."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ..units import human  # noqa: F401  (re-exported for the commands)

console = Console()


def emit_json(obj: dict) -> None:
    """One JSON object on stdout; Python ints stay exact (no float round trip)."""
    print(json.dumps(obj, indent=2))


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> Table:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*(str(x) for x in r))
    return t
