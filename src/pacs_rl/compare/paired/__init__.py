"""Paired-seed records, ``pacs-rl compare paired``: PACS against its baselines, seed pair after seed pair, until the
paired interval is narrow (±5 pp) or the record has 40 seeds.

Every method trains the bundled SmolLM2-135M-Instruct with the `pacs-rl train` CPU default of the day the record
was made (the record holds its values, and refuses to go on once the default changes), run to 48 steps, on the same
seeds, the same training problems in the same order and the same held-out set; the methods differ only in their
loss and its gradient clip (compare/methods.py, the one method table of every comparison). The runs of one seed are
paired; the record (one JSON file) holds every run and, for each method, the paired difference PACS − method over
the seeds both have, with its 95% interval.

One job a module:

- ``record``: the protocol (declared), the record file, its summary and cost;
- ``job``: one run, in a process of its own: train, evaluate, its result and what it logged while training;
- ``driver``: the runs, ``workers`` at a time, into the record, until the stopping rule or its time is up;
- ``tables``, ``figures``: the record as tables and figures (docs/RESULTS.md quotes them);
- ``collapses``: what the runs logged while training, per method, and the collapsed runs against the others;
- ``cli``: ``pacs-rl compare paired``, its options declared and checked before torch loads.
"""
