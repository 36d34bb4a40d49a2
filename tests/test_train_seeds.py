"""benchmarks/train_seeds.py: merging records trained on different machines, and the paired difference of arms."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from train_helpers import load_script


def _module():
    return load_script("benchmarks/train_seeds.py")


def _record(path: Path, device: str, dev_before: float, runs: list[tuple[str, int, float, float]]) -> Path:
    rows = [
        {
            "arm": arm,
            "seed": seed,
            "before": 0.1,
            "after": after,
            "dev_after": dev,
            "train_seconds": 100.0 + seed,
        }
        for arm, seed, after, dev in runs
    ]
    path.write_text(json.dumps({"command": f"run on {device}", "device": device, "cpu_capability": "AVX2",
                                "dev": "arithmetic", "dev_before": dev_before, "runs": rows}))  # fmt: skip
    return path


def test_merge_keeps_each_runs_device_and_base_and_pairs_arms_by_seed(tmp_path, monkeypatch, capsys):
    seeds = _module()
    cpu = _record(tmp_path / "cpu.json", "cpu", 0.2, [("a", 0, 0.5, 0.4), ("b", 0, 0.6, 0.5)])
    gpu = _record(
        tmp_path / "gpu.json",
        "NVIDIA H200",
        0.1,
        [("a", 1, 0.3, 0.2), ("b", 1, 0.2, 0.3), ("a", 2, 0.4, 0.3)],
    )
    out = tmp_path / "merged.json"
    argv = ["merge", str(cpu), str(gpu), "--out", str(out), "--pair", "a:b"]
    monkeypatch.setattr(sys, "argv", ["train_seeds.py", *argv])
    seeds.main(argv)
    merged = json.loads(out.read_text())
    assert [(r["arm"], r["seed"], r["device"]) for r in merged["runs"]] == [
        ("a", 0, "cpu"), ("b", 0, "cpu"), ("a", 1, "NVIDIA H200"), ("b", 1, "NVIDIA H200"), ("a", 2, "NVIDIA H200")
    ]  # fmt: skip
    a = merged["summary"]["a"]
    assert a["seeds"] == 3 and a["gain_min"] == pytest.approx(0.2) and a["gain_max"] == pytest.approx(0.4)
    # development-split gains against each record's own base: 0.4 - 0.2, 0.2 - 0.1, 0.3 - 0.1
    assert a["dev_gain_mean"] == pytest.approx((0.2 + 0.1 + 0.2) / 3, abs=1e-4) and a["dev_before"] == [
        0.1,
        0.2,
    ]
    assert a["train_seconds_median"] == {"cpu": 100.0, "NVIDIA H200": 101.5}
    (pair,) = merged["paired"]
    assert pair["seeds"] == [0, 1] and pair["differences"] == [pytest.approx(0.1), pytest.approx(-0.1)]
    assert pair["mean"] == pytest.approx(0.0, abs=1e-9) and merged["cpu_capability"] == "AVX2"
    assert "b - a, held-out after, paired over seeds [0, 1]" in capsys.readouterr().out


def test_a_pair_with_no_common_seed_is_refused_by_name():
    seeds = _module()
    runs = [{"arm": "a", "seed": 0, "after": 0.5}, {"arm": "b", "seed": 1, "after": 0.5}]
    with pytest.raises(SystemExit, match="--pair a:b: no seed ran both arms"):
        seeds.paired(runs, "a", "b")
