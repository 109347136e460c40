"""Shared CLI output: JSON for scripts, rich tables for people, unit formatting at the edge."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

console = Console()


def emit_json(obj: dict) -> None:
    """One JSON object on stdout; Python ints stay exact (no float round trip)."""
    print(json.dumps(obj, indent=2))


def human(n: int | float, unit: str = "") -> str:
    """1234567 -> '1.23 M'. Decimal prefixes (GB = 1e9)."""
    for div, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:,.2f} {prefix}{unit}"
    return f"{n:,} {unit}".rstrip()


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> Table:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*(str(x) for x in r))
    return t
