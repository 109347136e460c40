"""Shared CLI output: JSON for scripts, rich tables for people, unit formatting at the edge."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ..errors import TxcalcError
from ..units import human  # noqa: F401  (re-exported for the commands)

console = Console()


def strict_json(obj, **kw) -> str:
    """JSON text with ``allow_nan=False``: NaN and infinities are not JSON. Input validation
    (txcalc.inputs) keeps every figure finite; one that still is not becomes a TxcalcError
    (one line, exit 2), never invalid JSON."""
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError as e:
        raise TxcalcError(f"a result is not a finite number, so it cannot be written as JSON "
                          f"({e}); please report the command") from None


def emit_json(obj: dict) -> None:
    """One JSON object on stdout; Python ints stay exact (no float round trip). The text is
    built whole before anything is printed."""
    print(strict_json(obj, indent=2))


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]):
    """A table whose cells never wrap (a number or a name stays whole), or, when that is wider
    than the terminal, the same rows as key-value blocks (txcalc.cli.narrow)."""
    from .narrow import fitted
    return fitted(title, columns, rows, console.width)
