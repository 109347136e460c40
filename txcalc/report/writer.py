"""Write a report folder atomically: report.json, report.md, report.html and the PNGs.

Everything is built and written into a temporary sibling folder first and moved into place
at the end, so a bad request or a failure leaves no half-written report behind. An existing
folder is replaced only when it holds nothing but report files.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import TxcalcError
from .model import build_report
from .request import ReportRequest

REPORT_FILES = ("report.json", "report.md", "report.html")
#: progress(step description, steps done, total steps or None while unknown)
StepProgress = Callable[[str, int, "int | None"], None]


class ReportError(TxcalcError):
    """A report cannot be written where asked (the output path, not the model)."""


def _quiet(step: str, done: int, total: int | None) -> None:
    pass


def check_out_dir(out: Path) -> None:
    """Refuse a file, or a folder that holds anything but a previous report."""
    if out.exists() and not out.is_dir():
        raise ReportError(f"-o {str(out)!r} is a file, not a folder")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir()
                         if p.name not in REPORT_FILES and p.suffix != ".png")
        if foreign:
            raise ReportError(f"-o {str(out)!r} holds other files ({', '.join(foreign[:3])}"
                              f"{', ...' if len(foreign) > 3 else ''}); give an empty or new "
                              "folder")


def report_json(report: dict) -> str:
    """Strict JSON (no NaN or infinity); a non-finite figure is a ReportError, not bad JSON."""
    try:
        return json.dumps(report, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError as e:
        raise ReportError(f"a figure of the report is not a finite number ({e})") from None


def write_report(req: ReportRequest, out_dir: str | os.PathLike, *, validation_dir=None,
                 progress: StepProgress = _quiet) -> dict:
    """Build the report of ``req`` and write it to ``out_dir``; returns the report model."""
    from . import plots, render

    out = Path(out_dir)
    check_out_dir(out)
    plots.require_matplotlib()
    done = 0

    def step(desc: str, total: int | None = None) -> None:
        nonlocal done
        progress(desc, done, total)
        done += 1

    report = build_report(req, str(out_dir), validation_dir, progress=step)
    specs = plots.plot_specs(report)
    total = done + len(specs) + 1
    pngs = {}
    for spec in specs:
        step(f"plot {spec['file']}", total)
        pngs[spec["file"]] = plots.draw(report, spec)
    step("writing files", total)
    files = {name: png for name, png in pngs.items()}
    files["report.json"] = report_json(report).encode("utf-8")
    files["report.md"] = render.to_markdown(report).encode("utf-8")
    files["report.html"] = render.to_html(report, pngs).encode("utf-8")
    _write_folder(out, files)
    progress("done", total, total)
    return report


def _write_folder(out: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` into a temporary sibling of ``out``, then move it into place. On any
    failure nothing is left: not the temporary folder, not the parents it had to create."""
    created = None  # the topmost parent folder this call creates
    for parent in [out.parent, *out.parent.parents]:
        if parent.exists():
            break
        created = parent
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        tmp.chmod(0o755)  # mkdtemp makes it private; a report folder is for reading
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        _swap_into_place(tmp, out)
    except BaseException as e:
        for leftover in (tmp, created):
            if leftover is not None:
                shutil.rmtree(leftover, ignore_errors=True)
        if isinstance(e, OSError):
            raise ReportError(f"cannot write the report to {str(out)!r}: "
                              f"{e.strerror or e}") from None
        raise


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Move the finished folder to ``out``; a previous report there is removed only after."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rename(out, old / "r")
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
