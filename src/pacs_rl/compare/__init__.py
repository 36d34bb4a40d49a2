"""``pacs-rl compare``: the paper's experiments in miniature.

Trains each method (and each sweep value) from one base model on the same data, prompts, seeds and
rollout budget, evaluates every final model and the base model with one pass@k protocol, and writes a
paper-style report (tables with mean ± SE over seeds, curves, training dynamics, sweep heatmaps, the PACS
critic's accuracy/calibration, paired tests). Resumable; a manifest pins the settings of the folder.

    from pacs_rl.compare import resolve_settings, run_comparison
    run_comparison(resolve_settings(preset="smoke"), "runs/smoke")

Names load lazily, so ``import pacs_rl.compare`` does not import torch.
"""

from __future__ import annotations

from pacs_rl.lazy import lazy_face

_EXPORTS = {
    "PRESETS": "pacs_rl.compare.plan",
    "CompareError": "pacs_rl.compare.plan",
    "ManifestMismatch": "pacs_rl.compare.plan",
    "RunSpec": "pacs_rl.compare.plan",
    "build_plan": "pacs_rl.compare.plan",
    "method_names": "pacs_rl.compare.methods",
    "parse_sweep": "pacs_rl.compare.plan",
    "resolve_settings": "pacs_rl.compare.plan",
    "run_comparison": "pacs_rl.compare.execute",
    "write_comparison_report": "pacs_rl.compare.report",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
