"""The PACS-vs-GRPO record (docs/benchmarks/pacs_vs_grpo.json): `pacs-rl compare --preset pacs-vs-grpo` with the
record's file and settings, and the figures of docs/RESULTS.md. The engine is pacs_rl.compare.paired.

    python benchmarks/pacs_vs_grpo.py run --hours 8      # add pairs to the record (resumes; two runs at a time)
    python benchmarks/pacs_vs_grpo.py summary --markdown # the tables of docs/RESULTS.md
    python benchmarks/pacs_vs_grpo.py plot               # docs/results/pacs_vs_grpo/comparison.png
    python benchmarks/pacs_vs_grpo.py results            # docs/RESULTS.md's tables and cost, from the record
    python benchmarks/pacs_vs_grpo.py plot --record docs/benchmarks/pacs_vs_grpo_restatement_leak.json \\
        --critic docs/benchmarks/pacs_critic.json --out docs/results/pacs_vs_grpo_restatement_leak
    python benchmarks/pacs_vs_grpo.py regrade --record FILE --work FOLDER   # a closed record's samples, re-graded
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from pacs_rl.compare import paired
from pacs_rl.compare.paired_figures import critic_table, plot_comparison, plot_critic

RECORD = Path("docs/benchmarks/pacs_vs_grpo.json")
WORK = Path("runs/pacs_vs_grpo")
# how the record is made: PACS and GRPO only on every seed, greedy at 24 and 48 steps, pass@64 on every second
# seed since it was taken on (the record's protocol and protocol_changes)
RUN = ["--preset", paired.PRESET, "--record", str(RECORD), "--output-dir", str(WORK), "--workers", "2",
       "--threads", "1", "--n", "64", "--passk-every", "2"]  # fmt: skip


RESULTS = Path("docs/RESULTS.md")


def refill_results(record: dict, path: Path = RESULTS) -> Path:
    """Write the record's tables, its critic table and its cost per pair into docs/RESULTS.md, where its
    `<!-- tables: ... -->` and `<!-- critic_sound: ... -->` blocks and its cost sentence stand."""
    text = path.read_text()
    for name, body in (("tables", paired.markdown_tables(record)), ("critic_sound", critic_table([record]))):
        start = text.index("\n", text.index(f"<!-- {name}:")) + 1
        text = text[:start] + body + "\n" + text[text.index(f"<!-- end {name} -->") :]
    now = paired.cost(record)["pair"].get("greedy")
    if now:
        text = re.sub(r"greedy only, as now, [\d,]+ s, [\d,]+ s of it evaluation",
                      f"greedy only, as now, {now['seconds']:,} s, {now['eval_seconds']:,} s of it evaluation", text)  # fmt: skip
    path.write_text(text)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="pacs-rl compare --preset pacs-vs-grpo on the record")
    r.add_argument("--hours", default="8")
    s = sub.add_parser("summary", help="the record's tables and cost per pair")
    s.add_argument("--record", type=Path, default=RECORD)
    s.add_argument("--markdown", action="store_true", help="the tables of docs/RESULTS.md")
    s.add_argument("--write", action="store_true", help="write the record back, summary and cost recomputed")
    f = sub.add_parser("plot", help="figures of a record (and of implicit-critic records)")
    f.add_argument("--record", type=Path, default=RECORD)
    f.add_argument(
        "--critic", type=Path, nargs="*", default=[], help="records of PACS variants (frozen π_ref)"
    )
    f.add_argument("--out", type=Path, default=Path("docs/results/pacs_vs_grpo"))
    sub.add_parser("results", help="rewrite docs/RESULTS.md's tables, critic table and cost from the record")
    g = sub.add_parser("regrade", help="score a record's kept samples again with its protocol's grader")
    g.add_argument("--record", type=Path, default=RECORD)
    g.add_argument("--work", type=Path, default=WORK, help="the record's run folders")
    sub.add_parser("job", add_help=False)  # one run, as drivers started before the engine moved call it
    a, rest = p.parse_known_args()
    if a.command == "job":
        paired.main(["job", *rest])
    elif a.command == "run":
        sys.exit(subprocess.call([sys.executable, "-m", "pacs_rl", "compare", *RUN, "--hours", a.hours]))
    elif a.command == "plot":
        records = [json.loads(x.read_text()) for x in [a.record, *a.critic]]
        print(plot_comparison(records[0], a.out / "comparison.png"))
        if (
            a.critic
        ):  # the critic's figure and table pool the record's PACS runs with the frozen-π_ref records
            print(plot_critic(records, a.out / "critic_auc.png"))
            print(critic_table(records))
    elif a.command == "results":
        print(refill_results(json.loads(RECORD.read_text())))
    elif a.command == "regrade":
        record = json.loads(a.record.read_text())
        runs = paired.regrade(a.work)
        record["regraded"] = {"grader": paired.PROTOCOL["grader"], "commit": paired._commit(), "runs": runs}
        paired.save_record(a.record, record)
        print(json.dumps(runs, indent=1))
    else:
        record = json.loads(a.record.read_text())  # whatever its protocol
        print(paired.markdown_tables(record) if a.markdown else paired.summary_text(record))
        print(paired.cost_line(record))
        if a.write:
            paired.save_record(a.record, record)


if __name__ == "__main__":
    main()
