"""Adding a PACS option touches two files (CONTRIBUTING.md): its declaration in training/schema.py and its keyword
in the loss. This test makes exactly those two edits in a copy of the package and checks, in a fresh process on
that copy, that the option is a setting like the others (typed from text, checked before torch, accepted by the
config class) and that the trainer hands it to the loss, where it changes the loss."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "pacs_rl"

DECLARATION = """\
    pacs_label_smoothing: float = setting(
        0.0,
        "Smooth the 0/1 labels of the BCE towards 1/2 by this much.",
        check=_bounded(lambda v: 0 <= v < 1, " must be in [0, 1)."),
        loss_option="label_smoothing",
    )
"""

CHECK = textwrap.dedent(
    """
    import torch
    from types import SimpleNamespace

    from pacs_rl.algorithms import compute_policy_loss
    from pacs_rl.training.checks import config_problems, split_settings
    from pacs_rl.training.config import PACSConfig
    from pacs_rl.training.trainer import loss_options

    _, cfg = split_settings({"pacs_label_smoothing": "0.25"})
    assert cfg == {"pacs_label_smoothing": 0.25}, cfg
    problems = config_problems({"pacs_label_smoothing": 1.5}, installed=False)
    assert problems == ["pacs_label_smoothing=1.5 must be in [0, 1)."], problems
    config = PACSConfig(output_dir=OUT, use_cpu=True, report_to=[], pacs_label_smoothing=0.25)
    options = loss_options(config, "pacs")
    assert options["label_smoothing"] == 0.25, options

    torch.manual_seed(0)
    logp = torch.randn(4, 3)
    batch = dict(logp=logp, old_logp=logp.detach(), ref_logp=logp.detach() - torch.rand(4, 3), mask=torch.ones(4, 3),
                 rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]), group_size=4)
    plain, _ = compute_policy_loss("pacs", **batch, **{**options, "label_smoothing": 0.0})
    smoothed, _ = compute_policy_loss("pacs", **batch, **options)
    assert not torch.isclose(plain, smoothed), (plain, smoothed)
    print("ok")
    """
)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path.name}: {old!r} is not there once; update this test with the code"
    path.write_text(text.replace(old, new))


def test_a_pacs_option_is_two_files(tmp_path):
    copy = tmp_path / "src" / "pacs_rl"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*.py")}
    schema, loss = copy / "training" / "schema.py", copy / "algorithms" / "pacs.py"
    weighted = schema.read_text().index("    pacs_weighted: bool = setting(")
    end = schema.read_text().index("\n    )\n", weighted) + len("\n    )\n")
    schema.write_text(schema.read_text()[:end] + DECLARATION + schema.read_text()[end:])
    _edit(
        loss,
        "    weighted: bool = True,\n) -> tuple[Tensor",
        "    weighted: bool = True,\n    label_smoothing: float = 0.0,\n) -> tuple[Tensor",
    )
    _edit(
        loss,
        'per_seq = F.binary_cross_entropy_with_logits(psi, labels, reduction="none")',
        'per_seq = F.binary_cross_entropy_with_logits(psi, labels * (1 - label_smoothing) + label_smoothing / 2, reduction="none")',
    )
    changed = sorted(str(p) for p, text in before.items() if (copy / p).read_bytes() != text)
    assert changed == [str(Path("algorithms/pacs.py")), str(Path("training/schema.py"))]
    env = {**os.environ, "PYTHONPATH": str(copy.parent)}
    script = f"OUT = {str(tmp_path / 'run')!r}\n" + CHECK
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
