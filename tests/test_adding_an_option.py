"""Adding a PACS option is one declaration and the loss's keyword (CONTRIBUTING.md): a `LossOption` in
algorithms/options.py and the keyword in algorithms/pacs.py. This test makes exactly those two edits in a copy of the
package and checks, in a fresh process on that copy, that the option then reaches every place that takes a PACS
option: `pacs-rl train` (typed from text, checked before torch, accepted by the config class, handed to the loss, where
it changes the loss), `pacs-rl compare` (a variant and a sweep of it, typed and checked) and the verl plug-in (a field
of its settings and of verl's config class, checked by the guard, read for the loss)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "pacs_rl"

DECLARATION = """\
    LossOption(
        "pacs_label_smoothing",
        "label_smoothing",
        float,
        0.0,
        "Smooth the 0/1 labels of the BCE towards 1/2 by this much.",
        low=0,
        high=1,
        open_high=True,
    ),
"""

CHECK = textwrap.dedent(
    """
    import dataclasses

    import pytest
    import torch

    from pacs_rl.algorithms import compute_policy_loss
    from pacs_rl.compare.methods import CompareError, parse_method
    from pacs_rl.compare.plan import parse_sweep
    from pacs_rl.integrations.verl import options as verl
    from pacs_rl.integrations.verl.guard import verl_config_problems
    from pacs_rl.training.checks import config_problems, split_settings
    from pacs_rl.training.config import PACSConfig
    from pacs_rl.training.update import loss_options

    # pacs-rl train
    _, cfg = split_settings({"pacs_label_smoothing": "0.25"})
    assert cfg == {"pacs_label_smoothing": 0.25}, cfg
    problems = config_problems({"pacs_label_smoothing": 1.5}, installed=False)
    assert problems == ["pacs_label_smoothing=1.5: give a number in [0, 1)"], problems
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

    # pacs-rl compare: a variant of a paired record, a sweep of a planned comparison
    assert parse_method("pacs[pacs_label_smoothing=0.25]")["pacs_label_smoothing"] == 0.25
    with pytest.raises(CompareError, match=r"pacs_label_smoothing=1.5: give a number in \\[0, 1\\)"):
        parse_method("pacs[pacs_label_smoothing=1.5]")
    assert parse_sweep("pacs_label_smoothing=0,0.1") == ("pacs_label_smoothing", [0.0, 0.1])

    # the verl plug-in: its settings, the guard, what the loss reads, verl's config class
    field = {f.name: f for f in verl.LOSS_FIELDS}["pacs_label_smoothing"]
    assert field.default == 0.0, field
    section = {"loss_mode": "pacs", "pacs_label_smoothing": 0.25}
    assert verl.loss_keywords(section)["label_smoothing"] == 0.25
    assert verl.loss_keywords({})["label_smoothing"] == 0.0
    refused = verl.loss_setting_problems({"pacs_label_smoothing": 1.0})
    assert refused == ["actor_rollout_ref.actor.policy_loss.pacs_label_smoothing=1.0: give a number in [0, 1)"]
    launched = {"algorithm": {"adv_estimator": "pacs"},
                "actor_rollout_ref": {"actor": {"policy_loss": {"loss_mode": "pacs", "pacs_label_smoothing": -1}}}}
    assert any("pacs_label_smoothing=-1" in p for p in verl_config_problems(launched))

    @dataclasses.dataclass
    class PolicyLossConfig:  # a stand-in for verl's (tests/test_verl_guard.py builds over a closer one)
        loss_mode: str = "vanilla"

    generated = verl.policy_loss_config_class(PolicyLossConfig, "somewhere.core")
    assert generated(pacs_label_smoothing=0.25).pacs_label_smoothing == 0.25
    with pytest.raises(ValueError, match="pacs_label_smoothing=2.0"):
        generated(pacs_label_smoothing=2.0)
    print("ok")
    """
)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path.name}: {old!r} is not there once; update this test with the code"
    path.write_text(text.replace(old, new))


def test_a_pacs_option_is_one_declaration_and_the_loss_keyword(tmp_path):
    copy = tmp_path / "src" / "pacs_rl"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*.py")}
    options, loss = copy / "algorithms" / "options.py", copy / "algorithms" / "pacs.py"
    _edit(options, "\n    ),\n)\n", "\n    ),\n" + DECLARATION + ")\n")  # after the last one in PACS_OPTIONS
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
    assert changed == [str(Path("algorithms/options.py")), str(Path("algorithms/pacs.py"))]
    env = {**os.environ, "PYTHONPATH": str(copy.parent)}
    script = f"OUT = {str(tmp_path / 'run')!r}\n" + CHECK
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
