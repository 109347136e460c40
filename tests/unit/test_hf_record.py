"""The recording of HF's answers (tests/hf_record.py) can fail: a config it never saw, an
answer HF no longer gives."""

from __future__ import annotations

import json

import pytest

from ..hf_record import MissingRecording, Recorder, _live_requested, answer_key

RAW = {"model_type": "llama", "hidden_size": 16, "num_attention_heads": 2,
       "num_hidden_layers": 1, "vocab_size": 50, "intermediate_size": 32}


def never():
    raise AssertionError("a recorded answer must not build the HF model")


def test_the_key_is_canonical_and_names_the_measurement():
    assert answer_key(RAW, "counts") == answer_key(dict(reversed(list(RAW.items()))), "counts")
    assert answer_key(RAW, "counts") != answer_key({**RAW, "vocab_size": 51}, "counts")
    assert answer_key(RAW, "flops", batch=1, seq=2) != answer_key(RAW, "flops", batch=2, seq=1)
    assert answer_key(RAW, "flops", batch=1) != answer_key(RAW, "counts", batch=1)


def test_a_config_not_in_the_recording_fails_naming_the_re_record_command(tmp_path):
    path = tmp_path / "transformers-0.json"
    path.write_text(json.dumps({answer_key(RAW, "counts"): {"total": 1234}}))
    recorder = Recorder(path)
    assert recorder(RAW, "counts", never) == {"total": 1234}
    with pytest.raises(MissingRecording, match="TXCALC_HF_RECORD=1") as e:
        recorder({**RAW, "vocab_size": 51}, "counts", never)
    assert '"vocab_size":51' in str(e.value)
    with pytest.raises(MissingRecording, match="flops"):
        recorder(RAW, "flops", never, batch=1, seq=2)


def test_live_answers_must_agree_with_the_recording(tmp_path):
    path = tmp_path / "transformers-0.json"
    path.write_text(json.dumps({answer_key(RAW, "counts"): 1234}))
    live = Recorder(path, live=True)
    assert live(RAW, "counts", lambda: 1234) == 1234
    with pytest.raises(AssertionError, match="HF now says 1235"):
        live(RAW, "counts", lambda: 1235)
    assert live({**RAW, "vocab_size": 51}, "counts", lambda: 7) == 7  # not recorded: HF's word


def test_no_recording_for_the_version_means_live_and_record_merges(tmp_path):
    path = tmp_path / "transformers-0.json"
    assert Recorder(path).live
    path.write_text(json.dumps({"old": 1}))
    recorder = Recorder(path, record=True)
    assert recorder(RAW, "flops", lambda: None, batch=1) is None  # HF cannot run it: recorded
    assert recorder(RAW, "counts", lambda: 5) == 5
    recorder.save()
    assert json.loads(path.read_text()) == {"old": 1, answer_key(RAW, "counts"): 5,
                                            answer_key(RAW, "flops", batch=1): None}
    assert Recorder(path)(RAW, "flops", never, batch=1) is None



class Options:
    def __init__(self, markexpr: str):
        self.markexpr = markexpr

    def getoption(self, name: str, default=None):
        return {"markexpr": self.markexpr}.get(name, default)


@pytest.mark.parametrize("markexpr,live", [("", False), ("live", True), ("not live", False),
                                           ("live and not slow", True), ("slow", False)])
def test_the_live_marker_asks_hf_itself(markexpr, live, monkeypatch):
    for var in ("TXCALC_HF_LIVE", "TXCALC_HF_EXAMPLES"):
        monkeypatch.delenv(var, raising=False)
    assert _live_requested(Options(markexpr)) is live
    monkeypatch.setenv("TXCALC_HF_LIVE", "1")
    assert _live_requested(Options(markexpr))
