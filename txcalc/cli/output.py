"""Shared CLI output: JSON for scripts, rich tables for people, unit formatting at the edge."""

from __future__ import annotations

from collections.abc import Sequence

from ..answers.common import json_text as strict_json  # noqa: F401  (compare, report)
from ..units import human  # noqa: F401  (re-exported for the commands)



class _Console:
    """rich's Console, made on first use: a command that prints only JSON never imports rich
    (a third of a simple command's start-up). Attributes read and set pass through, so
    ``console.print``, ``console.width`` and a test's ``monkeypatch.setattr(console,
    "_width", 80)`` act on the one real Console."""

    __slots__ = ()
    _made = None

    def real(self):
        if _Console._made is None:
            from rich.console import Console
            # no emoji codes (txcalc writes none; a ":name:" in a model or file name would
            # become one: rich's table of codes takes ~2.5 ms to import), and no number
            # highlighting where no colour is shown (a pipe, a file, NO_COLOR): its regular
            # expressions (~1.5 ms to compile) would style what is dropped anyway
            c = Console(emoji=False)
            if c.color_system is None:
                from rich.highlighter import NullHighlighter
                c.highlighter = NullHighlighter()
            _Console._made = c
        return _Console._made

    def __getattr__(self, name):
        return getattr(self.real(), name)

    def __setattr__(self, name, value):
        setattr(self.real(), name, value)

    def __delattr__(self, name):
        delattr(self.real(), name)

    # special methods bypass __getattr__: rich's Live enters its console
    def __enter__(self):
        return self.real().__enter__()

    def __exit__(self, *exc):
        return self.real().__exit__(*exc)


console = _Console()


def emit_json(obj: dict) -> None:
    """One JSON object on stdout; Python ints stay exact (no float round trip). The text is
    built whole before anything is printed."""
    print(strict_json(obj, indent=2))


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]):
    """A table whose cells never wrap (a number or a name stays whole), or, when that is wider
    than the terminal, the same rows as key-value blocks (txcalc.cli.narrow)."""
    from .narrow import fitted
    return fitted(title, columns, rows, console.width)


def print_assumed(out: dict) -> None:
    """The defaults an answer assumed (its JSON's ``assumed``, sentences), one "Assumed: ..."
    line each, broken between words where the terminal is narrow."""
    from .narrow import say
    for note in out.get("assumed", ()):
        say(console, f"{note}.".split(" "), first="Assumed: ", sep=" ")
