"""``python -m pacs_rl.compare.paired job ...``: the run process as drivers started before the engine was split
spell it (:mod:`pacs_rl.compare.paired.job` is the run process now)."""

from pacs_rl.compare.paired.job import main

main()
