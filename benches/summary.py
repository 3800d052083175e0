"""The README's performance table, from the outputs `benches/run_all.sh` kept.

Run: python summary.py OUT_DIR → a Markdown table on stdout, one row per
line of a bench's output that gives a ratio (a figure followed by ×), in
the order of the items: the bench's own words, the ratio(s), the target
and whether it was met. Parsed loosely on purpose: a bench may reword its
lines (the isolation bench is another engineer's) and still shows up.
"""

from __future__ import annotations

import os
import re
import sys

#: (output file, the issue's item) in the order run_all.sh runs them.
SECTIONS = [
    ("chat_endpoint.txt", "1 chat"),
    ("bundled_call.txt", "2 bundled"),
    ("cold.txt", "3 cold start"),
    ("python_api.txt", "4 wheel"),
    ("isolation.txt", "5 isolation"),
    ("dispatch.txt", "per call vs Flowly semantics"),
]

#: A ratio: a figure and × (or x) with no space between (`1000 × sleep` is a count).
RATIO = re.compile(r"\d+(?:\.\d+)?[×x](?!\w)")
TARGET = re.compile(r"\(?target[^)]*\)?", re.I)
VERDICT = re.compile(r"\b(met|MISSED)\b")


def rows(path: str, item: str):
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not RATIO.search(line) or line.startswith("=="):
                continue
            target = TARGET.search(line)
            # The target's own figure (`target ≥ 2×`) is not a measured ratio.
            measured = TARGET.sub("", line)
            ratios = ", ".join(RATIO.findall(measured))
            if not ratios:
                continue
            verdict = VERDICT.findall(line)
            what = RATIO.sub("", TARGET.sub("", line))
            what = VERDICT.sub("", what)
            what = re.sub(r"\bratio\b", "", what)
            what = re.sub(r"\s+", " ", what).strip(" :;,-")
            target_text = target.group(0).strip("() ").replace("target", "").strip(" :") if target else ""
            target_text = VERDICT.sub("", target_text).strip(" :,")
            yield item, what.replace("|", "/"), ratios, target_text, verdict[-1] if verdict else ""


def main() -> None:
    out = sys.argv[1]
    print("| item | measurement | ratio | target | |")
    print("|---|---|---|---|---|")
    for name, item in SECTIONS:
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        for row in rows(path, item):
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
