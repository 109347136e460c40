"""The emitted files README.md shows (issue 31: one per family, train, fine-tune and serve)
are what their commands emit today: each fenced block holding a '# written by txcalc V: CMD'
header is compared with CMD run in this process, the txcalc version in that header aside, so
the README cannot drift from the emitters (regenerate a stale block by running its command)."""

import re
import shlex
from pathlib import Path

import pytest

from tests.cli.cli_run import run

README = Path(__file__).parents[2] / "README.md"
HEADER = re.compile(r"written by txcalc \S+: txcalc (.+)")


def _blocks() -> list[tuple[list[str], str]]:
    """(the command's argv, the block's text) of each README block with an emit header."""
    out = []
    for body in re.findall(r"^```\w*\n(.*?)^```", README.read_text(), re.DOTALL | re.MULTILINE):
        m = HEADER.search(body)
        if m is not None:
            out.append((shlex.split(m.group(1)), body))
    return out


BLOCKS = _blocks()


def _versionless(text: str) -> str:
    return re.sub(r"written by txcalc \S+:", "written by txcalc V:", text)


def test_the_readme_shows_one_emitted_file_per_family():
    commands = {" ".join(argv[:2]) if argv[0] == "plan" else argv[0] for argv, _ in BLOCKS}
    assert commands == {"plan train", "fit", "plan infer"}, commands


@pytest.mark.parametrize("argv,body", BLOCKS, ids=[a[a.index("--emit") + 1] for a, _ in BLOCKS])
def test_a_readme_block_is_what_its_command_emits(capsys, argv, body):
    rc, out, err = run(capsys, *argv)
    assert rc == 0, err
    assert _versionless(out) == _versionless(body)
