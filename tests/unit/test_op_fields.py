"""Every field of the Op row has one name and one meaning: no field is declared twice (a
dataclass silently keeps one of two same-named declarations: ``chunk`` once stood for both the
attention chunk and the SSD chunk), and each has a one-line ``#:`` doc, read from the source
(inline after the field, or the ``#:`` lines just above it). Nested dataclasses of ops.py (a
group of fields) are walked too, and their names may not repeat the outer ones."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap

import pytest

from txcalc.engine import ops
from txcalc.engine.ops import Op


def field_docs(source: str, cls_name: str) -> tuple[dict[str, str], list[str]]:
    """({field: its one-line doc, "" when none}, [field names declared more than once]) of
    the dataclass ``cls_name`` in ``source``."""
    lines = source.splitlines()
    tree = ast.parse(source)
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls_name)
    docs: dict[str, str] = {}
    twice: list[str] = []
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        if name in docs:
            twice.append(name)
        line = lines[node.lineno - 1]
        doc = line.partition("#:")[2].strip() if "#:" in line else ""
        j = node.lineno - 2
        above = []
        while not doc and j >= 0 and lines[j].strip().startswith("#:"):
            above.insert(0, lines[j].strip()[2:].strip())
            j -= 1
        docs[name] = doc or (above[0] if above else "")
    return docs, twice


def walk(cls, module, outer: tuple[str, ...] = ()):
    """(class, field, doc) of the dataclass and of the dataclasses of ``module`` its fields
    hold, recursively; raises on a name declared twice or repeated from an outer class."""
    docs, twice = field_docs(inspect.getsource(module), cls.__name__)
    assert not twice, f"{cls.__name__} declares {twice} more than once"
    names = [f.name for f in dataclasses.fields(cls)]
    assert set(names) == set(docs), "the source walk sees every field"
    clash = set(names) & set(outer)
    assert not clash, f"{cls.__name__} repeats {sorted(clash)} of an outer class"
    for f in dataclasses.fields(cls):
        yield cls, f.name, docs[f.name]
        inner = getattr(module, str(f.type).split()[0], None)
        if dataclasses.is_dataclass(inner):
            yield from walk(inner, module, outer + tuple(names))


def test_every_op_field_is_declared_once_with_a_one_line_doc():
    rows = list(walk(Op, ops))
    assert len(rows) == len(dataclasses.fields(Op)) >= 40
    undocumented = [f"{c.__name__}.{name}" for c, name, doc in rows if not doc]
    assert undocumented == []


def test_the_field_check_can_fail():
    """A class with a field declared twice and one without a doc is caught."""
    source = textwrap.dedent('''
        @dataclass
        class Row:
            chunk: int = 0  #: attention chunk
            #: spread over
            #: two lines
            heads: int = 0
            bare: int = 0
            chunk: int = 0  #: scan chunk
        ''')
    docs, twice = field_docs(source, "Row")
    assert twice == ["chunk"]
    assert docs == {"chunk": "scan chunk", "heads": "spread over", "bare": ""}


@pytest.mark.parametrize("name", ["attn_chunk", "scan_chunk", "kv_elements", "weight_format"])
def test_the_split_and_new_fields_have_their_own_meaning(name):
    docs, _ = field_docs(inspect.getsource(ops), "Op")
    assert docs[name]
