"""Cold-start timing and peak memory of whole commands, run side by side.

Run: python coldstart.py RUNS -- CMD... [--- CMD...]   → JSON on stdout:
one {"median_s", "min_s", "max_rss_kib"} per command, in order.  Each run is
a fresh process.  Peak RSS is read with GNU time (``/usr/bin/time -f %M``):
a child forked from this Python process would inherit its high-water mark
across exec, so wait4's own figure cannot go below this script's size.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time


GNU_TIME = "/usr/bin/time"


def peak_rss_kib(cmd, env):
    if not os.path.exists(GNU_TIME):
        return None
    done = subprocess.run([GNU_TIME, "-f", "%M", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    return int(done.stderr.strip().splitlines()[-1])


def split_env(cmd, env):
    """A command given as ``[{"VAR": "value"}, argv...]`` runs with those
    variables added to `env` (without an ``env`` process in front, whose
    start would be timed with it)."""
    if cmd and isinstance(cmd[0], dict):
        return list(cmd[1:]), {**env, **cmd[0]}
    return list(cmd), env


def measure(commands, runs, env):
    """Each command `runs` times, interleaved (one run of each per round), so
    a burst of load on a shared machine hits every command alike."""
    commands = [split_env(c, env) for c in commands]
    times = [[] for _ in commands]
    for _ in range(runs):
        for (cmd, cmd_env), took in zip(commands, times):
            start = time.perf_counter()
            code = subprocess.call(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cmd_env)
            took.append(time.perf_counter() - start)
            if code != 0:
                raise SystemExit(f"{cmd} exited with {code}")
    out = []
    for (cmd, cmd_env), took in zip(commands, times):
        peaks = [peak_rss_kib(cmd, cmd_env) for _ in range(3)]
        peak = None if peaks[0] is None else max(peaks)
        out.append({"median_s": statistics.median(took), "min_s": min(took), "max_rss_kib": peak})
    return out


def main():
    runs = int(sys.argv[1])
    rest = sys.argv[3:]
    commands, current = [], []
    for arg in rest:
        if arg == "---":
            commands.append(current)
            current = []
        else:
            current.append(arg)
    commands.append(current)
    env = dict(os.environ)
    # Measure a used machine: plugins' bytecode caches are written and reused.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # Warm the page cache once per command, then measure interleaved.
    measure(commands, 1, env)
    print(json.dumps(measure(commands, runs, env)))


if __name__ == "__main__":
    main()
