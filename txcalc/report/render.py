"""Markdown and self-contained HTML from the report model.

Every string of the report may come from a user or a file (a model name, a GPU name from
``--gpu-file``, a validation file's name and labels): untrusted input. The renderers

- strip control and bidirectional-override characters from all text (``clean``);
- mark every user string (each string of ``report["data"]``, each word of the command, the
  output and validation folders) before the builder's two inline marks, ``**bold**`` and
  ```code```, are turned into markup, so a user's ``**`` or backtick is never markup;
- escape user strings for Markdown (``md_text``: no link, image, code, emphasis, HTML, entity
  or autolink; ``_md_line``: no heading or list; ``_md_cell``: no cell break) and everything
  for HTML (``html.escape``).

The HTML embeds its PNGs as base64 data URIs, carries its CSS inline and forbids every network
fetch and script with a Content-Security-Policy: it opens offline and runs nothing.
"""

from __future__ import annotations

import base64
import html
import re
import shlex
import unicodedata

_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")
_MARK = re.compile(r"\x00(\d+)\x00")
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
#: bidirectional embeddings, overrides and isolates (also in category Cf; listed for clarity)
BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
#: Markdown punctuation that can start markup anywhere in a line (backslash-escaped)
_MD_ESCAPE = set("\\`*_[]()!~")


def clean(text: str) -> str:
    """``text`` without control, format (bidi, zero-width) or separator characters: line and
    paragraph breaks and tabs become spaces, lone surrogates U+FFFD, the rest is dropped."""
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "\t\n\r\v\f" or cat in ("Zl", "Zp"):
            out.append(" ")
        elif cat == "Cs":
            out.append("\ufffd")
        elif cat not in ("Cc", "Cf") and ch not in BIDI:
            out.append(ch)
    return "".join(out)


def md_text(text: str) -> str:
    """A user string as inert Markdown text: HTML-escaped (no tag, no entity), the punctuation
    that can start a link, image, code span, emphasis or strikethrough backslash-escaped (an
    underscore inside a word cannot, so ``q_proj`` stays as it is), and URLs and e-mail
    addresses broken up so that no autolink forms. ``text`` is clean()ed already."""
    out = []
    for i, ch in enumerate(html.escape(text, quote=False)):
        inword = ch == "_" and 0 < i < len(text) - 1 and text[i - 1].isalnum() \
            and text[i + 1].isalnum()
        out.append("\\" + ch if ch in _MD_ESCAPE and not inword else ch)
    return "".join(out).replace("://", "\\://").replace("www.", "www\\.").replace("@", "\\@")


#: where a report's data holds strings a user or a file chose (names, paths, labels)
_USER_FIELDS = (("model", "name"), ("model", "source"), ("gpu", "name"), ("gpu", "source"),
                ("plan", "gpu"), ("validation", "file"), ("validation", "setup"))


def user_strings(report: dict, extra=()) -> list[str]:
    """Every string of the report that may have come from a user or a file, clean()ed,
    longest first (with its capitalised form: a sentence may start with a model name): the
    names and sources of the model and the GPU, the request's strings, the validation file, its
    setup, labels and quantities, the words of the command (not its option flags) and
    ``extra``."""
    data = report.get("data") or {}
    found = [str(x) for x in extra]
    for outer, inner in _USER_FIELDS:
        # the catalog's datasheet URL stays a link; a --gpu-file's source is user text
        if (outer, inner) == ("gpu", "source") and not (data.get("request") or {}).get(
                "gpu_file"):
            continue
        v = (data.get(outer) or {}).get(inner) if isinstance(data.get(outer), dict) else None
        found.append(v)
    found += list((data.get("request") or {}).values())
    v = data.get("validation") or {}
    for r in (v.get("shown") or []) + (v.get("by_quantity") or []):
        found += [r.get("label"), r.get("quantity")]
    command = report.get("command")
    if isinstance(command, str):
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        found += [w for w in words[2:] if not w.startswith("-")]
    strings = {clean(s).strip() for s in found if isinstance(s, str)}
    strings |= {s[:1].upper() + s[1:] for s in strings}
    return sorted((s for s in strings if s), key=len, reverse=True)


class _Marked:
    """A report's text with its user strings replaced by ``\\0N\\0`` marks (``clean`` drops
    NUL, so no other text holds one): the builder's markup is found in what is left."""

    def __init__(self, report: dict, extra=()):
        strings = user_strings(report, extra)
        self.strings = strings
        self.pattern = (re.compile("|".join(map(re.escape, strings))) if strings else None)
        self.index = {s: i for i, s in enumerate(strings)}

    def mark(self, text: str) -> str:
        text = clean(text)
        if self.pattern is None:
            return text
        return self.pattern.sub(lambda m: f"\x00{self.index[m.group(0)]}\x00", text)

    def unmark(self, text: str, how) -> str:
        return _MARK.sub(lambda m: how(self.strings[int(m.group(1))]), text)


def _md_code(body: str) -> str:
    """A Markdown code span around ``body`` whose backtick fence is longer than any run of
    backticks inside it (a user's backtick cannot close it)."""
    longest = max((len(r) for r in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


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


def _md(text: str, marks: _Marked) -> str:
    """Markdown text on one line: user strings inert (``md_text``), the builder's
    ``**bold**`` and ```code``` kept; a newline cannot start a heading or end a table row."""
    t = html.escape(marks.mark(text), quote=False)
    codes: list[str] = []

    def stash(m: re.Match) -> str:
        codes.append(m.group(1))
        return f"\x01{len(codes) - 1}\x01"
    t = marks.unmark(_CODE.sub(stash, t), md_text)
    # in a code span text shows as it is (no backslash escapes there); the fence is longer
    # than any backtick run a user string brings
    return re.sub("\x01(\\d+)\x01", lambda m: _md_code(marks.unmark(
        codes[int(m.group(1))], lambda s: html.escape(s, quote=False))), t)


def _md_line(text: str, marks: _Marked) -> str:
    """A paragraph or list item: as ``_md``, and a leading block marker (``#``, ``>``, ``-``,
    ``+``, ``=``, ``1.``) a user string may bring is escaped so that no heading or list forms."""
    out = _md(text, marks)
    m = re.match(r"\d+(?=[.)])|(?=[#>+=-])", out)
    return out if m is None else out[:m.end()] + "\\" + out[m.end():]


def _md_cell(text: str, marks: _Marked | None = None) -> str:
    """A table cell: a pipe cannot end the cell (GFM removes the backslash again)."""
    return _md(text, marks or _Marked({})).replace("|", "\\|")


def to_markdown(report: dict, extra=()) -> str:
    """The report as Markdown; ``extra``: more user strings (the -o and validation folders)."""
    k = _Marked(report, extra)
    lines = [f"# {_md(report['title'], k)}", ""]
    for s in report["sections"]:
        lines += [f"## {_md(s['title'], k)}", ""]
        for p in s["paragraphs"]:
            lines += [_md_line(p, k), ""]
        if s["bullets"]:
            lines += [f"- {_md_line(b, k)}" for b in s["bullets"]] + [""]
        for t in s["tables"]:
            lines += [f"*{_md(t['caption'], k)}*", "",
                      "| " + " | ".join(_md_cell(c, k) for c in t["columns"]) + " |",
                      "|" + "|".join(["---"] + ["---:"] * (len(t["columns"]) - 1)) + "|"]
            lines += ["| " + " | ".join(_md_cell(c, k) for c in r) + " |" for r in t["rows"]]
            lines.append("")
        for p in s["plots"]:
            lines += [f"![{_md(p['alt'], k)}]({p['file']})", "", f"*{_md(p['title'], k)}*",
                      ""]
        for f in s.get("files", ()):
            # a fence longer than any run of backticks in the text, which cannot end it
            fence = "`" * max(3, 1 + max((len(r) for r in re.findall("`+", f["text"])),
                                         default=0))
            lines += [f"*{_md(f['name'], k)}*", "", fence, f["text"].rstrip("\n"), fence, ""]
    return "\n".join(lines).rstrip() + "\n"


def _h(text: str, marks: _Marked) -> str:
    """HTML text: everything escaped (quotes too: text may land in an attribute), then the
    builder's marks as <strong> and <code>; user strings never become markup."""
    t = html.escape(marks.mark(text), quote=True)
    t = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", t)
    t = _BOLD.sub(lambda m: f"<strong>{m.group(1)}</strong>", t)
    return marks.unmark(t, lambda s: html.escape(s, quote=True))


def _png_size(png: bytes) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def to_html(report: dict, pngs: dict[str, bytes], extra=()) -> str:
    """The report as one HTML file; ``pngs`` maps each plot's file name to its bytes."""
    k = _Marked(report, extra)
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_h(report['title'], k)}</title>", f"<style>{CSS}</style>", "</head>",
           "<body>", "<main>", f"<h1>{_h(report['title'], k)}</h1>"]
    for s in report["sections"]:
        out.append(f'<section id="{html.escape(s["id"])}">')
        out.append(f"<h2>{_h(s['title'], k)}</h2>")
        out += [f"<p>{_h(p, k)}</p>" for p in s["paragraphs"]]
        if s["bullets"]:
            out += ["<ul>", *(f"<li>{_h(b, k)}</li>" for b in s["bullets"]), "</ul>"]
        for t in s["tables"]:
            out += ["<table>", f"<caption>{_h(t['caption'], k)}</caption>",
                    "<thead><tr>" + "".join(f"<th>{_h(c, k)}</th>" for c in t["columns"])
                    + "</tr></thead>", "<tbody>"]
            out += ["<tr>" + "".join(f"<td>{_h(c, k)}</td>" for c in r) + "</tr>"
                    for r in t["rows"]]
            out += ["</tbody>", "</table>"]
        for p in s["plots"]:
            png = pngs[p["file"]]
            w, h = _png_size(png)
            data = base64.b64encode(png).decode("ascii")
            out += ['<figure class="plot">',
                    f'<img src="data:image/png;base64,{data}" width="{w}" height="{h}" '
                    f'alt="{_h(p["alt"], k)}" data-file="{html.escape(p["file"])}">',
                    f"<figcaption>{_h(p['title'], k)}</figcaption>", "</figure>"]
        for f in s.get("files", ()):
            out += [f"<details><summary>{html.escape(f['name'])}</summary>",
                    f"<pre>{html.escape(f['text'])}</pre></details>"]
        out.append("</section>")
    out += ["</main>", "</body>", "</html>"]
    return "\n".join(out) + "\n"
