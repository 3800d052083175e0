"""The performance table of docs/benchmarks.md, from the outputs
`benches/run_all.sh` kept.

Run: python summary.py OUT_DIR [--update FILE] → a Markdown table on
stdout; with --update, also written into FILE between its
`<!-- bench-table:begin -->` and `<!-- bench-table:end -->` lines (the rest
of FILE kept), after a line saying when and on what it was measured. One row per
line of a bench's output that gives a ratio (a figure followed by ×), in
the order of the items: the bench's own words, the ratio(s), the target
and whether it was met. Parsed loosely on purpose: a bench may reword its
lines (the isolation bench is another engineer's) and still shows up.
"""

from __future__ import annotations

import datetime
import os
import platform
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


BEGIN = "<!-- bench-table:begin -->"
END = "<!-- bench-table:end -->"


def table(out: str) -> list[str]:
    lines = ["| item | measurement | ratio | target | |", "|---|---|---|---|---|"]
    for name, item in SECTIONS:
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        for row in rows(path, item):
            lines.append("| " + " | ".join(row) + " |")
    return lines


def machine() -> str:
    """`N cores (CPU model)`, as far as this system says."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model}){idle_polling()}"


def idle_polling() -> str:
    """How long an idle CPU polls before it halts, when the guest kernel's
    `haltpoll` driver says: at 0 every wake-up of an idle vCPU waits for the
    host, which sets the one-client rows (docs/benchmarks.md)."""
    try:
        with open("/sys/devices/system/cpu/cpuidle/current_driver", encoding="utf-8") as f:
            driver = f.read().strip()
        with open("/sys/module/haltpoll/parameters/guest_halt_poll_ns", encoding="utf-8") as f:
            poll_ns = f.read().strip()
    except OSError:
        return ""
    return f", cpuidle {driver} polling {poll_ns} ns before a halt"


def update(path: str, lines: list[str]) -> None:
    """Replace what is between the markers of `path` with `lines`."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        sys.exit(f"{path}: needs one {BEGIN} line and one {END} line after it, around the table")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    quick = " PLUGHOST_BENCH_QUICK=1: shortened rounds, noisier figures." if os.environ.get("PLUGHOST_BENCH_QUICK") == "1" else ""
    stamp = (
        f"Written by `bash benches/run_all.sh` on {datetime.date.today().isoformat()}: "
        f"release build, {machine()}.{quick}"
    )
    body = "\n".join([BEGIN, stamp, "", *lines, END])
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(head + body + tail)
    os.replace(path + ".tmp", path)


def main() -> None:
    args = sys.argv[1:]
    target = None
    if "--update" in args:
        i = args.index("--update")
        target = args[i + 1]
        del args[i : i + 2]
    lines = table(args[0])
    print("\n".join(lines))
    if target:
        update(target, lines)


if __name__ == "__main__":
    main()
