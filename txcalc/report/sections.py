"""The building blocks of a report's display text: sections, tables and plots as plain data
that the renderers (``render.py``, ``plots.py``) turn into Markdown, HTML and PNGs."""

from __future__ import annotations

from ..answers.costs import MEMORY_PARTS, memory_words

#: display names of memory categories (the data keeps the engine's and planner's keys): the
#: hierarchy's words, as the CLI's memory table and the page show them
CATEGORY_LABELS = {k: memory_words(k, short=True) for k in MEMORY_PARTS}


def section(sid: str, title: str, paragraphs=(), tables=(), plots=(), bullets=(),
            files=()) -> dict:
    """A report section. Paragraph and cell strings are plain text (escaped by the renderers);
    ``**bold**`` spans are the only markup. ``files``: ``{"name", "text"}`` shown verbatim (a
    fenced block in Markdown, a folded <pre> in HTML)."""
    d = {"id": sid, "title": title, "paragraphs": list(paragraphs), "bullets": list(bullets),
         "tables": list(tables), "plots": list(plots)}
    if files:
        d["files"] = list(files)
    return d


def table(caption: str, columns: list[str], rows: list[list]) -> dict:
    return {"caption": caption, "columns": columns, "rows": [[str(c) for c in r] for r in rows]}


def plot(file: str, kind: str, title: str, alt: str) -> dict:
    return {"file": file, "kind": kind, "title": title, "alt": alt}
