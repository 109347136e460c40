"""Memory is shown in GiB (2^30 bytes), labelled GiB, as nvidia-smi and torch count it (issue
29, item 6): an H100 read "85.9 GB", an H200 "151.4 GB", cards every user knows as 80 and 141
GiB. The CLI, the page and the reports say GiB; JSON stays in bytes; GB is left only where the
user gave GB (--gpu-gb) and for link bandwidths (GB/s)."""

import json
import re
from pathlib import Path

from txcalc.cli import main

ROOT = Path(__file__).resolve().parents[2]
DECIMAL_GB = re.compile(r"\bGB\b(?!/s)")


def run(capsys, *argv) -> str:
    assert main(list(argv)) == 0
    return " ".join(capsys.readouterr().out.split())


def test_the_cli_says_gib(capsys):
    out = run(capsys, "memory", "llama-3-8b", "--seq", "4096", "--gpu", "h200")
    assert "GiB (2^30)" in out and "139.6 GiB usable" in out and "141 GiB" in out
    assert not DECIMAL_GB.search(out), out
    for argv in (("fit", "llama-3-8b", "--gpu", "h100"),
                 ("plan", "train", "llama-3.2-1b", "--tokens", "1B", "--gpu", "h100"),
                 ("plan", "infer", "llama-3-8b", "--gpu", "h100", "--context", "8k")):
        out = run(capsys, *argv)
        assert "GiB" in out and not DECIMAL_GB.search(out), (argv, out)
    assert "80 GiB" in run(capsys, "fit", "llama-3-8b", "--gpu", "h100")


def test_json_stays_in_bytes(capsys):
    out = run(capsys, "memory", "llama-3-8b", "--seq", "4096", "--json")
    d = json.loads(out)
    assert d["weights_bytes"] == 16_060_522_496 and isinstance(d["gpu_bytes"], int)


def test_gpu_gb_stays_in_the_unit_given(capsys):
    out = run(capsys, "memory", "--params", "80e9", "--gpu-gb", "80")
    assert "80 GB usable, as given by --gpu-gb" in out and "149.01 GiB" in out


def test_reports_and_page_say_gib():
    for md in (ROOT / "reports").glob("*/report.md"):
        text = md.read_text()
        assert "GiB" in text and "GB = 1e9" not in text, md
    page = (ROOT / "txcalc" / "web" / "static" / "app.js").read_text()
    assert "2 ** 30" in page and '" GiB"' in page
