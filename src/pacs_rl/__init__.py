"""pacs-rl: PACS and RLVR baselines for post-training language models."""

__version__ = "0.1.0"
