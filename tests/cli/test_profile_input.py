"""Device profiles (``--profile`` files, ``txcalc calibrate`` output) are user input: every
number must be a finite, non-bool number in range, refused with a ProfileError naming it."""

from __future__ import annotations

import json

import pytest

from txcalc.engine.hardware import get_gpu
from txcalc.engine.timing import DeviceProfile, ProfileError


def _good() -> dict:
    return DeviceProfile.from_gpu(get_gpu("h100")).to_json()


def test_a_saved_profile_loads_back_equal(tmp_path):
    p = DeviceProfile.from_gpu(get_gpu("h100"))
    p.save(tmp_path / "p.json")
    assert DeviceProfile.load(tmp_path / "p.json") == p


@pytest.mark.parametrize("field,value,named", [
    ("bw_efficiency", True, "bw_efficiency"),
    ("bw_efficiency", -0.5, "bw_efficiency"),
    ("bw_efficiency", "0.8", "bw_efficiency"),
    ("hbm_bytes_per_s", True, "hbm_bytes_per_s"),
    ("hbm_bytes_per_s", -1, "hbm_bytes_per_s"),
    ("hbm_bytes_per_s", 1e30, "hbm_bytes_per_s"),
    ("peak_flops", {"bf16": -1.0}, "peak_flops['bf16']"),
    ("peak_flops", {"bf16": True}, "peak_flops['bf16']"),
    ("peak_flops", {"bf16": 1e300}, "peak_flops['bf16']"),
    ("peak_flops", {"bf16": "fast"}, "peak_flops['bf16']"),
    ("flop_efficiency", {"matmul": False}, "matmul"),
    ("flop_efficiency", {"matmul": 2.0}, "matmul"),
])
def test_bad_profile_numbers_are_refused_by_name(tmp_path, field, value, named):
    d = _good()
    d[field] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d), encoding="utf-8")
    with pytest.raises(ProfileError, match="device profile") as e:
        DeviceProfile.load(path)
    assert named in str(e.value)
