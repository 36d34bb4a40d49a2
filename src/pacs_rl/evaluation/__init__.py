"""Evaluation with the paper's protocol (§4.1, Appendix B.3): n samples per problem at T = 0.6,
top-p 0.95, verified answers, unbiased pass@k (eq. 10), tables and plots like the paper's.

    from pacs_rl.evaluation import EvalConfig, run_eval
    metrics = run_eval(EvalConfig(model="smollm2-135m", benchmark="math500", n=4, limit=50,
                                  max_new_tokens=512, output_dir="runs/smol"))

Names are imported lazily, so ``import pacs_rl.evaluation`` stays light (no torch).
"""

from __future__ import annotations

from pacs_rl.lazy import lazy_face

_EXPORTS = {
    "EvalConfig": "pacs_rl.evaluation.runner",
    "ResumeMismatch": "pacs_rl.evaluation.runner",
    "compute_metrics": "pacs_rl.evaluation.runner",
    "read_samples": "pacs_rl.evaluation.samples",
    "count_correct": "pacs_rl.evaluation.samples",
    "run_eval": "pacs_rl.evaluation.runner",
    "run_evals": "pacs_rl.evaluation.runner",
    "load_metrics": "pacs_rl.evaluation.report",
    "plot_passk": "pacs_rl.evaluation.report",
    "rank_marks": "pacs_rl.evaluation.report",
    "results_table": "pacs_rl.evaluation.report",
    "write_report": "pacs_rl.evaluation.report",
    "pass_at_k": "pacs_rl.algorithms.passk",
    "mean_pass_at_k": "pacs_rl.algorithms.passk",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
