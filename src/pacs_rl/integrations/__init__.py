"""Adapters that run pacs-rl's algorithms inside other training engines.

- :mod:`pacs_rl.integrations.verl`: PACS as a verl advantage estimator and policy loss (from a clone:
  ``pip install -e ".[verl]"``); see docs/VERL.md.
"""
