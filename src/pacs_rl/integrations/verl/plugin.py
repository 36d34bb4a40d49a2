"""Entry point of group ``verl.plugins``: verl loads it while running ``import verl`` in every process
(driver, task runner, Ray workers), which registers PACS there. verl swallows an exception raised here
(it logs it at DEBUG level only), so a broken install shows up later as "Unknown advantage estimator
simply: pacs"; ``python -c "import pacs_rl.integrations.verl.plugin"`` then shows the real error.

Also usable without the entry point: ``VERL_USE_EXTERNAL_MODULES=pacs_rl.integrations.verl.plugin``.
"""

from . import core  # noqa: F401  (importing core registers the estimator and the loss)
