"""Markdown and self-contained HTML from the report model.

Every string of the report may come from a user or a config file (a model name is untrusted
input), so both renderers escape all text first (``html.escape``) and only then turn the two
inline marks the builder uses, ``**bold**`` and ```code```, into markup. The HTML embeds its
PNGs as base64 data URIs, carries its CSS inline and forbids every network fetch and script with
a Content-Security-Policy: it opens offline and runs nothing.
"""

from __future__ import annotations

import base64
import html
import re

_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1a1a1a;
       max-width: 1000px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.6em; border-bottom: 2px solid #4C72B0; padding-bottom: .2em; }
h2 { font-size: 1.25em; margin-top: 2em; color: #2b4a7a; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
caption { text-align: left; font-style: italic; padding-bottom: .3em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; }
td { text-align: right; font-variant-numeric: tabular-nums; }
td:first-child, th:first-child { text-align: left; }
th { background: #eef2f8; }
figure { margin: 1em 0; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: .9em; color: #555; }
code { background: #f3f3f3; padding: 0 .2em; word-break: break-all; }
section#answer { background: #f5f8fc; border-left: 4px solid #4C72B0; padding: .2em 1em; }
"""


def _inline(text: str, bold: tuple[str, str], code: tuple[str, str], quote: bool) -> str:
    """Escape, then apply the builder's two inline marks. Markdown keeps quotes as they are
    (they are inert there); HTML escapes them too (text may land in an attribute)."""
    out = html.escape(text, quote=quote)
    out = _CODE.sub(lambda m: f"{code[0]}{m.group(1)}{code[1]}", out)
    return _BOLD.sub(lambda m: f"{bold[0]}{m.group(1)}{bold[1]}", out)


def _md(text: str) -> str:
    """Markdown text on one line: a newline in a user string cannot start a heading or end
    a table row."""
    one_line = text.replace("\r", " ").replace("\n", " ")
    return _inline(one_line, ("**", "**"), ("`", "`"), quote=False)


def _md_cell(text: str) -> str:
    return _md(text).replace("|", "\\|")


def to_markdown(report: dict) -> str:
    lines = [f"# {_md(report['title'])}", ""]
    for s in report["sections"]:
        lines += [f"## {_md(s['title'])}", ""]
        for p in s["paragraphs"]:
            lines += [_md(p), ""]
        if s["bullets"]:
            lines += [f"- {_md(b)}" for b in s["bullets"]] + [""]
        for t in s["tables"]:
            lines += [f"*{_md(t['caption'])}*", "",
                      "| " + " | ".join(_md_cell(c) for c in t["columns"]) + " |",
                      "|" + "|".join(["---"] + ["---:"] * (len(t["columns"]) - 1)) + "|"]
            lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in t["rows"]]
            lines.append("")
        for p in s["plots"]:
            lines += [f"![{_md(p['alt'])}]({p['file']})", "", f"*{_md(p['title'])}*", ""]
    return "\n".join(lines).rstrip() + "\n"


def _h(text: str) -> str:
    return _inline(text, ("<strong>", "</strong>"), ("<code>", "</code>"), quote=True)


def _png_size(png: bytes) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def to_html(report: dict, pngs: dict[str, bytes]) -> str:
    """The report as one HTML file; ``pngs`` maps each plot's file name to its bytes."""
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_h(report['title'])}</title>", f"<style>{CSS}</style>", "</head>",
           "<body>", "<main>", f"<h1>{_h(report['title'])}</h1>"]
    for s in report["sections"]:
        out.append(f'<section id="{html.escape(s["id"])}">')
        out.append(f"<h2>{_h(s['title'])}</h2>")
        out += [f"<p>{_h(p)}</p>" for p in s["paragraphs"]]
        if s["bullets"]:
            out += ["<ul>", *(f"<li>{_h(b)}</li>" for b in s["bullets"]), "</ul>"]
        for t in s["tables"]:
            out += ["<table>", f"<caption>{_h(t['caption'])}</caption>",
                    "<thead><tr>" + "".join(f"<th>{_h(c)}</th>" for c in t["columns"])
                    + "</tr></thead>", "<tbody>"]
            out += ["<tr>" + "".join(f"<td>{_h(c)}</td>" for c in r) + "</tr>"
                    for r in t["rows"]]
            out += ["</tbody>", "</table>"]
        for p in s["plots"]:
            png = pngs[p["file"]]
            w, h = _png_size(png)
            data = base64.b64encode(png).decode("ascii")
            out += ['<figure class="plot">',
                    f'<img src="data:image/png;base64,{data}" width="{w}" height="{h}" '
                    f'alt="{_h(p["alt"])}" data-file="{html.escape(p["file"])}">',
                    f"<figcaption>{_h(p['title'])}</figcaption>", "</figure>"]
        out.append("</section>")
    out += ["</main>", "</body>", "</html>"]
    return "\n".join(out) + "\n"
