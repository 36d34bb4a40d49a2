"""``pacs-rl compare``: the paper's experiments in miniature, and PACS against GRPO powered by seed pairs.

One engine: a planner (methods × variants × seeds, `pacs_rl.compare.plan`), an executor that runs each training and
evaluation in a process of its own and resumes what is half done (`pacs_rl.compare.driver`, `job`), one record
format (`pacs_rl.compare.record`), and views over a record (the planned comparison's report.md with its tables,
curves, sweep heatmaps and paired tests, `report`; a paired record's tables and figures, `tables`, `figures`).

    from pacs_rl.compare import Options, comparison_protocol, resolve_settings, run
    settings = resolve_settings(preset="smoke")
    run(Options(record=Path("runs/smoke/record.json"), work=Path("runs/smoke"), seeds=settings["seeds"],
                hours=None, target=None, max_seeds=None), comparison_protocol(settings))

Names load lazily, so ``import pacs_rl.compare`` does not import torch.
"""

from __future__ import annotations

from pacs_rl.lazy import lazy_face

_EXPORTS = {
    "PRESETS": "pacs_rl.compare.plan",
    "CompareError": "pacs_rl.compare.methods",
    "Options": "pacs_rl.compare.driver",
    "comparison_protocol": "pacs_rl.compare.plan",
    "method_names": "pacs_rl.compare.methods",
    "parse_method": "pacs_rl.compare.methods",
    "resolve_settings": "pacs_rl.compare.plan",
    "run": "pacs_rl.compare.driver",
    "variants": "pacs_rl.compare.plan",
    "write_comparison_report": "pacs_rl.compare.report",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
