"""HF's answers for the drawn configs, recorded once per ``transformers`` version.

Building a Hugging Face model (even on meta) and counting a training step with FlopCounterMode
is the expensive oracle of the conformance tests; their hypothesis draws are derandomized, so
every run asks it the same questions. The answers live in
``tests/data/hf_recorded/transformers-<version>.json``, one number (or list, or dict of numbers)
per key ``<sha256 of the canonical JSON of the config dict, the measurement and its
arguments>``. A test asks ``hf_answers(raw, measurement, compute, **args)``:

- default run: the recorded answer; a key missing from the recording fails the test, naming
  the command that re-records (a draw the recording never saw is a draw nobody checked);
- live (``pytest -m live``, ``TXCALC_HF_LIVE=1``, ``TXCALC_HF_EXAMPLES`` set, or no recording
  for the installed transformers): ``compute()`` builds the HF model as before; where the
  recording has the key, it must agree with what HF says now;
- ``TXCALC_HF_RECORD=1``: live, and the answers are merged into the recording when the
  session ends (delete the file first to drop keys no draw asks for any more).

The draws must be the same in every run: the tests derandomize them, and this module keeps
hypothesis from mixing the project's own constants into them (below). An edited test function
or strategy, another hypothesis version, or a parametrised test moved to another file (its
pytest node id is part of the draw's seed: hypothesis' pytest plugin keys each parametrisation
by node id) draws other configs: re-record then.

The answer is ``None`` when HF itself cannot run the config (``compute()`` raises one of the
``cannot_run`` exceptions; the tests then reject the draw); that is recorded too.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Callable

import pytest


def _draw_without_local_constants() -> None:
    """Recent hypothesis versions mix into their draws constants read from the project's own
    modules loaded at the time (txcalc/, reference/): the derandomized draws would then move with
    every edit of txcalc and with which test files ran first, and a recording keyed by the
    drawn configs could not be replayed. Its own constant pool (fixed per hypothesis version)
    stays; the project's is left empty, for every hypothesis test of the session."""
    from hypothesis.internal.conjecture import providers

    if hasattr(providers, "_get_local_constants"):
        empty = providers.Constants()
        providers._get_local_constants = lambda: empty
        providers.CONSTANTS_CACHE.cache.clear()


_draw_without_local_constants()

DIR = Path(__file__).parent / "data" / "hf_recorded"
RECORD_CMD = "TXCALC_HF_RECORD=1 python3 -m pytest -p no:cacheprovider tests/<the file> -k <test>"


class MissingRecording(AssertionError):
    """The recording has no answer for a config that a test drew."""


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def answer_key(raw: dict, measurement: str, **args) -> str:
    """A stable key: the config dict, what was measured and how (batch, seq, head...)."""
    text = canonical({"config": raw, "measurement": measurement, "args": args})
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def dumps(answers: dict) -> str:
    """One answer a line, sorted by key: small diffs when a version is re-recorded."""
    lines = ",\n".join(f"{json.dumps(k)}:{canonical(answers[k])}" for k in sorted(answers))
    return "{\n" + lines + "\n}\n"


def recording_path(version: str) -> Path:
    return DIR / f"transformers-{version}.json"


class Recorder:
    """HF's answers from one recording file, or from HF itself when ``live``."""

    def __init__(self, path: Path, *, live: bool = False, record: bool = False):
        self.path = path
        self.answers: dict = json.loads(path.read_text()) if path.exists() else {}
        # a transformers version nobody recorded yet: check everything against HF itself
        self.live = live or record or not path.exists()
        self.record = record
        self.new: dict = {}

    def __call__(self, raw: dict, measurement: str, compute: Callable[[], object], *,
                 cannot_run: tuple[type[Exception], ...] = (), **args):
        """HF's answer to ``measurement`` of ``raw``; ``compute()`` raising one of
        ``cannot_run`` (HF's own forward cannot run the config) answers None."""
        key = answer_key(raw, measurement, **args)
        if not self.live:
            if key not in self.answers:
                raise MissingRecording(
                    f"no recorded HF answer for {measurement}{args or ''} of {canonical(raw)} "
                    f"in {self.path} (key {key}); re-record with {RECORD_CMD} (it builds the "
                    "HF models), or check live with TXCALC_HF_LIVE=1 (an edited test function "
                    "or a new hypothesis draws other configs). If another failure is reported "
                    "with this one, it is hypothesis shrinking that one: fix it first")
            return self.answers[key]
        try:  # through JSON, as a recorded answer would come (tuples as lists)
            answer = json.loads(canonical(compute()))
        except cannot_run:
            answer = None
        if self.record:
            self.new[key] = answer
        elif key in self.answers:
            assert self.answers[key] == answer, (
                f"the recording {self.path} says {self.answers[key]!r} for {measurement}{args} of "
                f"{canonical(raw)}, HF now says {answer!r}: re-record with {RECORD_CMD}")
        return answer

    def save(self) -> None:
        """Merge the answers recorded in this process into the file (several pytest
        processes may record at once: the merge holds a lock)."""
        if not self.new:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = Path(tempfile.gettempdir()) / f"txcalc-{self.path.stem}.lock"
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            merged = json.loads(self.path.read_text()) if self.path.exists() else {}
            merged.update(self.new)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(dumps(merged))
            os.replace(tmp, self.path)
        self.new = {}


def _live_requested(config) -> bool:
    markexpr = config.getoption("markexpr", "") or ""
    return (os.environ.get("TXCALC_HF_LIVE") == "1" or "TXCALC_HF_EXAMPLES" in os.environ
            or re.search(r"(?<!not )\blive\b", markexpr) is not None)


@pytest.fixture(scope="session")
def hf_answers(request) -> Recorder:
    """The session's Recorder (the tests that use it carry the ``live`` marker)."""
    version = importlib.metadata.version("transformers")
    record = os.environ.get("TXCALC_HF_RECORD") == "1"
    recorder = Recorder(recording_path(version), live=_live_requested(request.config),
                        record=record)
    yield recorder
    recorder.save()
