"""Terminal output that stays readable at any width (80 columns and up).

Two rules: no table cell is ever wrapped inside (a number or a layout name such as
``tp8 pp16 dp32 cp4 z2 sp v4 mb1`` stays on one line), and a summary line breaks only between
the phrases it is made of, never inside one. A table wider than the terminal folds into a
vertical key-value view: each row's first cell on a line of its own, then its other cells as
``column value`` pairs, packed into lines that fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text


def pack(phrases: Sequence[str], width: int, indent: str = "  ", first: str = "",
         sep: str = ", ") -> list[str]:
    """``first`` + ``phrases`` joined by ``sep`` into lines of at most ``width`` characters,
    breaking only between phrases; continuation lines start with ``indent``. A phrase longer
    than a whole line gets a line of its own (it is never cut)."""
    mark = sep.rstrip()  # what ends each phrase but the last (","), then the gap (" ")
    gap = sep[len(mark):] or " "
    lines: list[str] = []
    line, has = first, False
    for i, p in enumerate(phrases):
        piece = p + (mark if i < len(phrases) - 1 else "")
        g = gap if has else ""
        if line.strip() and len(line) + len(g) + len(piece) > width:
            lines.append(line.rstrip())
            line = indent + piece
        else:
            line = line + g + piece
        has = True
    if line.strip():
        lines.append(line.rstrip())
    return lines


def say(console, phrases: Sequence[str], first: str = "", indent: str = "    ",
        sep: str = ", ") -> None:
    """Print ``first`` + phrases on as many lines as the terminal needs (see ``pack``)."""
    for line in pack(phrases, max(console.width, 40), indent, first, sep):
        console.print(Text(line), no_wrap=True, overflow="ignore", crop=False)


def min_widths(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's narrowest width: its widest cell (never wrapped) or its header's longest
    word (a header may wrap between words: "weights GB/GPU" over two lines)."""
    return [max([len(w) for w in c.split()] + [len(r[i]) for r in rows] + [1])
            for i, c in enumerate(columns)]


def fitted(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]],
           width: int, fold_note: str = ""):
    """A table when it fits ``width`` without wrapping a cell (headers may wrap between
    words), else a vertical key-value view: a rich renderable either way."""
    from rich.console import Group
    cells = [[str(x) for x in r] for r in rows]
    width = max(width, 40)
    mins = min_widths(columns, cells)
    edges = sum(mins) + 3 * len(mins) + 1 <= width
    if edges or sum(mins) + 3 * len(mins) - 1 <= width:  # without the outer border: 2 fewer
        # fixed widths: every cell whole; the room left widens the headers that would wrap
        spare = width - (sum(mins) + 3 * len(mins) + (1 if edges else -1))
        widths = list(mins)
        for i, c in enumerate(columns):
            grow = min(spare, max(0, len(c) - widths[i]))
            widths[i] += grow
            spare -= grow
        t = Table(title=title, title_justify="left", show_edge=edges)
        for i, (c, w) in enumerate(zip(columns, widths)):
            t.add_column(c, justify="left" if i == 0 else "right", width=w)
        for r in cells:
            t.add_row(*r)
        return t
    out = [Text(line, style="italic", no_wrap=True, overflow="ignore")
           for line in pack((title + (f" ({fold_note})" if fold_note else "")).split(" "),
                            width, "  ", sep=" ")]
    for r in cells:
        out.append(Text(r[0], style="bold", no_wrap=True, overflow="ignore"))
        pairs = [f"{c}: {v}" for c, v in zip(columns[1:], r[1:])]
        out += [Text(line, no_wrap=True, overflow="ignore")
                for line in pack(pairs, width, "    ", "    ", sep="   ")]
    return Group(*out)


def fit_table(console, title: str, columns: Sequence[str], rows: Sequence[Sequence[object]],
              fold_note: str = "") -> None:
    """Print ``fitted(...)`` at the terminal's width."""
    console.print(fitted(title, columns, rows, console.width, fold_note), crop=False)
