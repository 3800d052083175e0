"""The audit log file: append, read back, summarise."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

logger = logging.getLogger(__name__)


def log_path() -> Path:
    from flowly.profile import get_flowly_home

    return Path(get_flowly_home()) / "tool-audit" / "calls.jsonl"


def append(record: dict) -> None:
    import json  # on first use: plugin start-up stays cheap

    record = {"ts": round(time.time(), 3), **record}
    path = log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    except OSError as exc:  # never break the agent loop over an audit line
        logger.warning("could not write the audit record to %s: %s", path, exc)


def read() -> list[dict]:
    import json

    path = log_path()
    records = []
    try:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    logger.warning("skipping malformed audit line %d of %s", number, path)
    except FileNotFoundError:
        pass
    return records


def summary(limit: int = 10) -> str:
    records = read()
    if not records:
        return "No tool calls recorded yet."
    per_tool: dict[str, list[dict]] = {}
    for record in records:
        per_tool.setdefault(str(record.get("tool", "?")), []).append(record)
    ranked = sorted(per_tool.items(), key=lambda item: (-len(item[1]), item[0]))[:limit]
    lines = [f"{len(records)} tool call(s) recorded across {len(per_tool)} tool(s):"]
    for tool, calls in ranked:
        failures = sum(1 for c in calls if not c.get("success"))
        mean = sum(float(c.get("duration_ms", 0.0)) for c in calls) / len(calls)
        lines.append(f"- {tool}: {len(calls)} call(s), {failures} failed, mean {mean:.2f} ms")
    return "\n".join(lines)


def recent(count: int) -> str:
    records = read()[-count:]
    if not records:
        return "No tool calls recorded yet."
    lines = []
    for r in records:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(r.get("ts", 0))))
        status = "ok" if r.get("success") else "failed"
        lines.append(f"{when}  {r.get('tool')}  {status}  {r.get('duration_ms')} ms")
    return "\n".join(lines)


def clear() -> int:
    count = len(read())
    try:
        os.remove(log_path())
    except FileNotFoundError:
        pass
    return count
