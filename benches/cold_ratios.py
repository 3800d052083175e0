"""Issue 26 item 3, side by side in one run: `plughost plugins list` cold.

Run: python cold_ratios.py PLUGHOST_BIN RUNS (with the interpreter plughost
links against, so both sides start the same CPython). Prints

* an empty home (plughost's defaults: the bundled plugins on) against
  `python -c pass`: time (target ≤ 1.2×) and peak memory (target ≤ 2×);
* 100 enabled user plugins (one tool and one hook each; bundled plugins
  off, as the loader has none) against `benches/min_loader.py` on the same
  home (target ≤ 1.0×).

As a user runs them: bytecode cached (CPython's own for the stdlib and the
plugins, plughost's for its embedded modules); the first run of each writes
the caches and is not counted. Runs are interleaved (`coldstart.py`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coldstart  # noqa: E402

PLUGIN = (
    "def register(ctx):\n"
    "    ctx.register_tool('tool_{i}', {{'type': 'object', 'properties': {{'q': {{'type': 'string'}}}}}}, lambda q='': q)\n"
    "    ctx.register_hook('post_tool_call', lambda c: None)\n"
)


def hundred(home: str) -> None:
    enabled = []
    for i in range(100):
        name = f"p{i:03}"
        d = os.path.join(home, "plugins", name)
        os.makedirs(d)
        with open(os.path.join(d, "plugin.yaml"), "w") as f:
            f.write(f"name: {name}\n")
        with open(os.path.join(d, "__init__.py"), "w") as f:
            f.write(PLUGIN.format(i=i))
        enabled.append(name)
    with open(os.path.join(home, "config.json"), "w") as f:
        json.dump({"plugins": {"enabled": enabled}}, f)


def main() -> None:
    bin, runs = sys.argv[1], int(sys.argv[2])
    py = sys.executable
    here = os.path.dirname(os.path.abspath(__file__))
    work = tempfile.mkdtemp(prefix="plughost-cold-")
    empty, many, nothing = (os.path.join(work, n) for n in ("empty", "many", "no-bundled"))
    for d in (empty, nothing):
        os.makedirs(d)
    hundred(many)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PLUGHOST_BUNDLED_DIR", None)
    commands = [
        [bin, "--home", empty, "plugins", "list"],
        [py, "-c", "pass"],
        [{"PLUGHOST_BUNDLED_DIR": nothing}, bin, "--home", many, "plugins", "list"],
        [py, os.path.join(here, "min_loader.py"), many],
    ]
    try:
        coldstart.measure(commands, 1, env)  # writes the bytecode caches
        ours, floor, ours100, loader = coldstart.measure(commands, runs, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def ms(r):
        return r["median_s"] * 1e3

    def mib(r):
        return (r["max_rss_kib"] or 0) / 1024

    def verdict(ok):
        return "met" if ok else "MISSED"

    print(f"plugins list, empty home   median {ms(ours):6.1f} ms   peak {mib(ours):5.1f} MiB")
    print(f"python -c pass             median {ms(floor):6.1f} ms   peak {mib(floor):5.1f} MiB")
    print(f"plugins list, 100 plugins  median {ms(ours100):6.1f} ms   peak {mib(ours100):5.1f} MiB")
    print(f"min_loader.py, 100 plugins median {ms(loader):6.1f} ms   peak {mib(loader):5.1f} MiB")
    t, m, h = ours["median_s"] / floor["median_s"], mib(ours) / max(mib(floor), 1e-9), ours100["median_s"] / loader["median_s"]
    print(f"ratio cold start, empty home vs python -c pass: time {t:.2f}× (target ≤ 1.2×) {verdict(t <= 1.2)}")
    print(f"ratio cold start, empty home vs python -c pass: peak memory {m:.2f}× (target ≤ 2×) {verdict(m <= 2)}")
    print(f"ratio cold start, 100 plugins vs min_loader.py: time {h:.2f}× (target ≤ 1.0×) {verdict(h <= 1.0)}")


if __name__ == "__main__":
    main()
