"""Paired-seed records, ``pacs-rl compare paired``: PACS against its baselines, seed pair after seed pair, until the
paired interval is narrow.

Every method trains the bundled SmolLM2-135M-Instruct with the `pacs-rl train` CPU default (two-digit ± one-digit
arithmetic, 16 sequences per optimizer step, lr 2e-5 constant, T = 0.7, 96 tokens), run to 48 steps instead of 24,
on the same seeds, the same training problems in the same order and the same held-out set; the methods differ
only in their loss and its gradient clip (compare/methods.py, the one method table of every comparison). The runs
of one seed are paired; the record (one JSON file) holds every run and, for each method, the paired difference
PACS − method over the seeds both have, with its 95% interval.

One job a module:

- ``record``: the protocol (declared), the record file, its summary and cost;
- ``job``: one run, in a process of its own: train, evaluate, its result;
- ``driver``: the runs, ``workers`` at a time, into the record, until the stopping rule;
- ``tables``, ``figures``: the record as tables and figures (docs/RESULTS.md quotes them);
- ``cli``: ``pacs-rl compare paired``, its options declared and checked before torch loads.
"""
