"""Adapters that run pacs-rl's algorithms inside other training engines.

- :mod:`pacs_rl.integrations.verl`: PACS as a verl advantage estimator and policy loss (``pip install
  "pacs-rl[verl]"``); see docs/VERL.md.
"""
