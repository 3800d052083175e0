"""Codumentor and Felix plugins through the installed wheel's Python API.

The plugins are written on disk the way their seeds' authors write them (a
Felix source tree with a `felix.plugins` entry point and
`register(registry)`; a Codumentor `plugin.yaml` + `backend/<package>` class
with `async def register(self, bus)`), loaded by `plughost.Host` and driven
through `plugins()`, `call_tool()` and `Agent.run()`, whose report is what
`plughost run --json` prints. A Felix distribution is also built as a wheel,
pip-installed into a fresh virtualenv and found by the `plughost` console
script as an entry point.

Plugin packages are imported under their real names, into this one
process's `sys.modules`: every test names its packages uniquely (`tag`), so
no test gets another's module.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import hashlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import plughost
from conftest import in_process_only

if TYPE_CHECKING:
    from plughost import ModelCall, TurnReport

# ── Plugins as their authors write them ──────────────────────────


def felix_tree(root: Path, directory: str, entries: dict[str, str], package: str, code: str, version: str = "1.2.3") -> Path:
    """A Felix source tree: `pyproject.toml` + `src/<package>/__init__.py`."""
    tree = root / directory
    (tree / "src" / package).mkdir(parents=True)
    lines = [
        "[project]",
        f'name = "{directory}"',
        f'version = "{version}"',
        'description = "A Felix plugin"',
        "",
        '[project.entry-points."felix.plugins"]',
        *(f'{name} = "{value}"' for name, value in entries.items()),
    ]
    (tree / "pyproject.toml").write_text("\n".join(lines) + "\n")
    (tree / "src" / package / "__init__.py").write_text(textwrap.dedent(code))
    return tree


def codumentor_plugin(root: Path, key: str, package: str, code: str, manifest_extra: str = "") -> Path:
    """A Codumentor plugin: `plugin.yaml` (dialect, entry) + `backend/<package>`."""
    directory = root / key
    (directory / "backend" / package).mkdir(parents=True)
    (directory / "plugin.yaml").write_text(
        f"name: {key}\nversion: 0.4.0\ndialect: codumentor\nentry: {package}:Probe\n{textwrap.dedent(manifest_extra)}"
    )
    (directory / "backend" / package / "__init__.py").write_text(textwrap.dedent(code))
    return directory


FELIX_PLUGIN = """
    import asyncio
    import json
    import threading
    from pathlib import Path

    from felix.tools.types import define_tool, ToolOutputDict
    from felix_ai.types import ChatMessage

    TREE = Path(__file__).resolve().parents[2]
    _BARRIERS = {}
    _LOCK = threading.Lock()


    def count_words(args, ctx):
        # ctx is Felix's ToolInvocationCtx.
        return f"{len(args['text'].split())} words (thread={ctx.thread_id})"


    def fail(args):
        raise PermissionError("forbidden: /etc/secret")


    async def meet(args, ctx):
        # Waits until `parties` calls of `group` are in flight at once: it
        # only returns "met" when that many turns really overlap.
        with _LOCK:
            barrier = _BARRIERS.setdefault(args["group"], threading.Barrier(args["parties"]))
        try:
            await asyncio.to_thread(barrier.wait, 20)
        except threading.BrokenBarrierError:
            return ToolOutputDict(content=f"alone in {args['group']}")
        return ToolOutputDict(content=f"met in {args['group']} (thread={ctx.thread_id})")


    class Tools:
        def register_tools(self, register):
            register("felix_wc", lambda: define_tool(
                name="felix_wc", description="Count the words of a text",
                args_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                handler=count_words))
            register("felix_fail", lambda: define_tool(name="felix_fail", description="Always fails", handler=fail))
            register("felix_meet", lambda: define_tool(
                name="felix_meet", description="Wait for the other turns",
                args_schema={"type": "object", "properties": {"group": {"type": "string"}, "parties": {"type": "integer"}},
                             "required": ["group", "parties"]},
                handler=meet))


    def no_passwords(call, ctx):
        if "password" in json.dumps(call["args"]).lower():
            return {"block": True, "reason": "no passwords in tool calls"}
        return {"block": False}


    def mark(call, result, is_error, ctx):
        if call["name"] == "felix_wc" and not is_error:
            return {"content": f"{result} [checked]"}
        return None


    def brief(messages, ctx):
        return [ChatMessage(role="user", content=f"NOTE: answer briefly ({ctx['thread_id']})")]


    async def started(app):
        await asyncio.sleep(0)
        with open(TREE / "started.txt", "a") as f:
            f.write(f"started {sorted(app.state.plugins)}\\n")


    def register(registry):
        registry.register_plugin(Tools())
        registry.register_before_tool(no_passwords)
        registry.register_after_tool(mark)
        registry.register_before_turn(brief)
        registry.register_startup_hook(started)
"""

CODUMENTOR_PLUGIN = """
    import asyncio
    from pathlib import Path

    from codumentor.agent.context_notes import add_context_note

    ROOT = Path(__file__).resolve().parents[2]


    class Probe:
        meta = {"name": "__KEY__"}

        def __init__(self, config=None, **kwargs):
            self.banned = set(kwargs.get("banned", ()))
            self.note = kwargs.get("note", "Be brief.")

        async def register(self, bus):
            bus.on("onServerReady", self.ready)
            bus.on("onPromptAssemble", self.add_note, priority=10)
            bus.on("onPromptAssemble", self.raiser, priority=50)
            bus.on("onToolInvokeStart", self.vet, priority=10)
            bus.on("onBeforeSendResponse", self.sign, priority=10)

        async def ready(self, agent, ctx, payload):
            with open(ROOT / "ready.txt", "a") as f:
                f.write(f"ready agent={agent} ctx={ctx}\\n")

        async def add_note(self, agent, ctx, payload):
            note = add_context_note(
                payload.get("messages", []),
                marker="[probe]",
                render=lambda: f"[probe] {self.note}",
                scope="prefix",
            )
            if note is not None:
                return {"type": "continue", "patch": {"messages": note}}
            return None

        async def raiser(self, agent, ctx, payload):
            raise KeyError("missing index")

        async def vet(self, agent, ctx, payload):
            if payload["tool"] in self.banned:
                await ctx["ui_event_emitter"]("tool_vetoed", {"tool": payload["tool"]})
                return {"type": "veto_tool", "reason": f"{payload['tool']} is not allowed here"}
            if payload["args"].get("text") == "abort":
                return {"type": "abort_turn", "reason": "budget exhausted", "assistant_text": "Stopping here."}
            return None

        async def sign(self, agent, ctx, payload):
            return {"type": "continue", "patch": {"assistant_text": payload["assistant_text"] + " -- probe"}}
"""


class Env:
    """A home with the Felix plugin `wc<tag>` and the Codumentor plugin
    `probe-<tag>`, both enabled, with package names unique to the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tag = uuid.uuid4().hex[:8]
        self.home = tmp_path / "home"
        self.plugins = self.home / "plugins"
        self.plugins.mkdir(parents=True)
        self.felix_key = f"wc{self.tag}"
        self.felix_package = f"felix_wc_{self.tag}"
        self.codu_key = f"probe-{self.tag}"
        self.codu_package = f"codu_probe_{self.tag}"
        self.felix_dir = felix_tree(
            self.plugins, "felix-wc", {self.felix_key: f"{self.felix_package}:register"}, self.felix_package, FELIX_PLUGIN
        )
        self.codu_dir = codumentor_plugin(
            self.plugins,
            self.codu_key,
            self.codu_package,
            CODUMENTOR_PLUGIN.replace("__KEY__", self.codu_key),
            "priority: 20\nargs:\n  banned: [felix_fail]\n",
        )
        self.enabled = [self.felix_key, self.codu_key]
        self.write_config()
        # The bundled plugins are not what these tests are about.
        self.host_kwargs: dict[str, Any] = {"disable": ["command-guard", "disk-cleanup", "tool-audit"]}

    def write_config(self, extra: dict[str, Any] | None = None) -> None:
        config: dict[str, Any] = {"plugins": {"enabled": self.enabled}}
        config.update(extra or {})
        (self.home / "config.json").write_text(json.dumps(config))

    def host(self, **kwargs: Any) -> plughost.Host:
        return plughost.Host(home=self.home, **{**self.host_kwargs, **kwargs})

    def script(self, name: str, text: str) -> Path:
        path = self.home / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        return path

    def transcript(self, session: str) -> list[dict[str, Any]]:
        lines = (self.home / "sessions" / f"{session}.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


TURN = """
turns:
  - say: "Checking."
    tool_calls:
      - name: felix_wc
        args: {text: "one two three"}
      - name: felix_wc
        args: {text: "my password"}
      - name: felix_fail
        args: {}
  - say: "All done."
"""


def run_turn(agent: plughost.Agent, message: str, session: str) -> TurnReport:
    async def main() -> TurnReport:
        return await agent.run(message, session_id=session)

    return asyncio.run(main())


def contents(call: ModelCall) -> list[str]:
    return [m.get("content") or "" for m in call["messages"]]


def check_turn(env: Env, report: TurnReport, session: str) -> None:
    """The effects of both plugins' hooks on one turn of `TURN`."""
    assert report["completed"] is True, report
    assert report["error"] is None
    assert report["ended_by"] == "answer"
    assert report["aborted"] is None
    # onBeforeSendResponse revised the answer: the reply and the transcript.
    assert report["reply"] == "All done. -- probe"
    last = env.transcript(session)[-1]
    assert (last["role"], last["content"]) == ("assistant", "All done. -- probe")
    results = [(c["name"], c["result"], c["outcome"]) for c in report["tool_calls"]]
    assert results == [
        # Felix's tool, its handler's ctx, and after_tool's rewrite.
        ("felix_wc", f"3 words (thread={session}) [checked]", "ok"),
        # Felix's before_tool block: its exact text, outcome blocked.
        ("felix_wc", "[error/blocked] no passwords in tool calls", "blocked"),
        # Codumentor's veto of a Felix tool (Felix's before_tool let it through).
        ("felix_fail", "[blocked: felix_fail is not allowed here]", "blocked"),
    ]
    assert report["ui_events"] == [{"type": "tool_vetoed", "data": {"tool": "felix_fail"}}]
    # What the model saw: two calls, each with the Codumentor note after the
    # system prompt and Felix's before_turn notes (carried: one, then two).
    calls = report["model_calls"]
    assert [c["iteration"] for c in calls] == [1, 2]
    for number, call in enumerate(calls, 1):
        messages = call["messages"]
        assert messages[0]["role"] == "system"
        assert messages[1] == {"role": "user", "content": "[probe] Be brief."}, "the note's tag never reaches the wire"
        assert contents(call).count(f"NOTE: answer briefly ({session})") == number
        assert {"felix_wc", "felix_fail", "felix_meet"} <= set(call["tools"])
    # ... and none of it is in the transcript.
    stored = json.dumps(env.transcript(session))
    assert "[probe]" not in stored and "NOTE: answer briefly" not in stored
    # The raising Codumentor handler: reported once per model call, skipped.
    assert report["hook_errors"] == [
        {
            "plugin": env.codu_key,
            "dialect": "codumentor",
            "event": "onPromptAssemble",
            "handler": f"{env.codu_package}.Probe.raiser",
            "error": "KeyError: 'missing index'",
        }
    ] * 2


# ── Listing, tool calls, an agent turn ───────────────────────────


def test_plugins_lists_both_dialects_with_their_fields(env: Env) -> None:
    host = env.host()
    plugins = {p["key"]: p for p in host.plugins()}
    felix = plugins[env.felix_key]
    assert felix["dialect"] == "felix"
    assert felix["entry"] == f"{env.felix_package}:register"
    assert felix["dependencies"] == []
    assert felix["source"] == "user"
    assert felix["version"] == "1.2.3" and felix["description"] == "A Felix plugin"
    assert (felix["status"], felix["loaded"], felix["error"]) == ("loaded", True, None)
    assert Path(felix["path"]) == env.felix_dir, "a source tree's path is the tree, whatever its key"
    assert felix["tools"] == ["felix_wc", "felix_fail", "felix_meet"]
    assert {"before_tool", "after_tool", "before_turn"} <= set(felix["hooks"])

    codu = plugins[env.codu_key]
    assert codu["dialect"] == "codumentor"
    assert codu["entry"] == f"{env.codu_package}:Probe"
    assert codu["dependencies"] == []
    assert codu["source"] == "user"
    assert codu["version"] == "0.4.0"
    assert (codu["status"], codu["loaded"], codu["error"]) == ("loaded", True, None)
    assert Path(codu["path"]) == env.codu_dir
    assert {"onPromptAssemble", "onToolInvokeStart", "onBeforeSendResponse"} <= set(codu["hooks"])

    tools = {t["name"]: t for t in host.tools()}
    assert tools["felix_wc"]["plugin"] == env.felix_key
    assert tools["felix_wc"]["parameters"]["required"] == ["text"]
    # Listing does not start the host: no startup hook ran.
    assert not (env.felix_dir / "started.txt").exists()
    assert not (env.codu_dir / "ready.txt").exists()


def test_call_tool_runs_felix_tools_through_felix_hooks_and_starts_the_host(env: Env) -> None:
    host = env.host()
    assert host.call_tool("felix_wc", {"text": "one two three"}, session_id="direct") == "3 words (thread=direct) [checked]"
    assert host.call_tool("felix_wc", {"text": "my password"}) == "[error/blocked] no passwords in tool calls"
    # The raising tool: Felix's error text and code. Codumentor's veto
    # applies inside agent turns only (its tool events are agent-loop events:
    # their handlers get the turn's agent and ctx).
    assert host.call_tool("felix_fail") == "[error/permission_denied] forbidden: /etc/secret"
    assert host.call_tool("felix_wc", {}).startswith("Error: invalid arguments for felix_wc:")

    async def awaited() -> str:
        return await host.acall_tool("felix_wc", {"text": "a b"}, session_id="aw")

    assert asyncio.run(awaited()) == "2 words (thread=aw) [checked]"
    # The first tool call started the host: startup hooks ran once.
    assert (env.felix_dir / "started.txt").read_text() == f"started {sorted([env.felix_key, env.codu_key])}\n"
    assert (env.codu_dir / "ready.txt").read_text() == "ready agent=None ctx={}\n"


def test_an_agent_turn_reports_what_every_hook_did(env: Env) -> None:
    host = env.host()
    agent = plughost.Agent(host, model=f"scripted:{env.script('turn', TURN)}")
    report = run_turn(agent, "hello", "s1")
    check_turn(env, report, "s1")
    assert report["input"] == "hello" and report["session_key"] == "s1"
    assert report["iterations"] == 2
    # The host started once, before the first turn, and not again.
    run_turn(agent, "again", "s2")
    assert (env.felix_dir / "started.txt").read_text().count("started ") == 1
    assert (env.codu_dir / "ready.txt").read_text() == "ready agent=None ctx={}\n"
    # The CLI's `run --json` reports the same turn the same way.
    exe = Path(sys.executable).with_name("plughost")
    no_bundled = env.home / "no-bundled"
    no_bundled.mkdir()
    cli = subprocess.run(
        [str(exe), "--home", str(env.home), "run", "--json", "--model", "scripted", "--script", str(env.home / "turn.yaml"), "--session", "cli", "hello"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PLUGHOST_BUNDLED_DIR=str(no_bundled)),
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    from_cli = json.loads(cli.stdout)
    assert set(from_cli) == set(report)
    check_turn(env, from_cli, "cli")
    # send() is the same turn, reduced to its reply.

    async def send() -> str:
        return await agent.send("third", session_id="s3")

    assert asyncio.run(send()) == "All done. -- probe"


def test_abort_turn_ends_the_turn_completed_with_its_reason(env: Env) -> None:
    script = env.script(
        "abort",
        """
        turns:
          - say: "Trying."
            tool_calls:
              - name: felix_wc
                args: {text: "abort"}
          - say: never
        """,
    )
    agent = plughost.Agent(env.host(), model=f"scripted:{script}")
    report = run_turn(agent, "go", "ab")
    assert (report["completed"], report["ended_by"], report["aborted"]) == (True, "aborted", "budget exhausted")
    assert report["reply"] == "Stopping here.", "the response hooks do not run after an abort"
    assert report["tool_calls"][0]["result"] == "[blocked: budget exhausted]"
    assert report["tool_calls"][0]["outcome"] == "blocked"
    assert len(report["model_calls"]) == 1


def test_help_shows_the_new_arguments_with_their_defaults() -> None:
    assert str(inspect.signature(plughost.Agent.run)) == "(self, /, message, session_id='default')"
    assert "hook_timeout=30.0" in str(inspect.signature(plughost.Host))


def test_a_failed_model_call_is_reported_not_raised(env: Env) -> None:
    agent = plughost.Agent(env.host(), model="openai:test", base_url="http://127.0.0.1:9/v1", model_timeout=5)
    report = run_turn(agent, "hi", "down")
    assert report["completed"] is False
    assert report["ended_by"] == "error"
    assert report["error"] and "model call failed" in report["error"]
    assert len(report["model_calls"]) == 1, "the call was made, and what it was sent is reported"


def test_a_hanging_handler_is_skipped_at_the_hook_timeout(env: Env) -> None:
    hang = codumentor_plugin(
        env.plugins,
        f"hang-{env.tag}",
        f"codu_hang_{env.tag}",
        """
        import asyncio

        class Probe:
            def __init__(self, config=None, **kwargs):
                pass

            async def register(self, bus):
                bus.on("onAfterPromptAssemble", self.hang)

            async def hang(self, agent, ctx, payload):
                await asyncio.sleep(30)
        """,
    )
    env.enabled.append(hang.name)
    env.write_config()
    script = env.script("one", "turns:\n  - say: ok\n")
    agent = plughost.Agent(env.host(hook_timeout=0.5), model=f"scripted:{script}")
    report = run_turn(agent, "hi", "hang")
    assert report["completed"] is True and report["reply"] == "ok -- probe"
    hung = [e for e in report["hook_errors"] if e["plugin"] == hang.name]
    assert hung == [
        {
            "plugin": hang.name,
            "dialect": "codumentor",
            "event": "onAfterPromptAssemble",
            "handler": f"codu_hang_{env.tag}.Probe.hang",
            "error": "timed out after 0.5 s and was skipped",
        }
    ]
    with pytest.raises(plughost.ConfigError, match="hook_timeout must be a number of seconds above 0"):
        plughost.Host(home=env.home, hook_timeout=0)


# ── Threads and asyncio ──────────────────────────────────────────

MEET = """
turns:
  - say: "Meeting."
    tool_calls:
      - name: felix_meet
        args: {group: "%s", parties: %d}
      - name: felix_wc
        args: {text: "one two three"}
      - name: felix_wc
        args: {text: "my password"}
      - name: felix_fail
        args: {}
  - say: "All done."
"""


def check_met(env: Env, report: TurnReport, session: str, group: str) -> None:
    meet, *rest = report["tool_calls"]
    assert meet["result"] == f"met in {group} (thread={session})", "the turns ran at the same time"
    report_rest: Any = dict(report, tool_calls=rest, model_calls=report["model_calls"])
    check_turn(env, report_rest, session)


def test_turns_and_hosts_from_many_threads_at_once(env: Env) -> None:
    in_process_only("the overlap is proven by a rendezvous in the plugin's module; in one worker the two sync calls did not meet (docs/isolation.md, parity gaps)")
    threads = 4
    script = env.script("meet", MEET % ("threads", threads))
    shared = env.host()

    def work(i: int) -> TurnReport:
        # Half the threads share one host; the others each build their own
        # over the same home (loading it from their thread).
        host = shared if i % 2 else env.host()
        agent = plughost.Agent(host, model=f"scripted:{script}")
        return run_turn(agent, f"hello {i}", f"t{i}")

    with ThreadPoolExecutor(threads) as pool:
        reports = list(pool.map(work, range(threads)))
    for i, report in enumerate(reports):
        # Each turn has its own hook errors, UI events and model calls.
        check_met(env, report, f"t{i}", "threads")


def test_turns_and_tool_calls_under_asyncio_run(env: Env) -> None:
    turns = 3
    script = env.script("meet", MEET % ("asyncio", turns + 1))
    host = env.host()
    agent = plughost.Agent(host, model=f"scripted:{script}")

    async def turn(i: int) -> TurnReport:
        return await agent.run(f"hello {i}", session_id=f"a{i}")

    async def meet() -> str:
        return await host.acall_tool("felix_meet", {"group": "asyncio", "parties": turns + 1}, session_id="direct")

    async def main() -> tuple[list[TurnReport], str]:
        reports, direct = await asyncio.gather(asyncio.gather(*(turn(i) for i in range(turns))), meet())
        await agent.shutdown()
        return reports, direct

    reports, direct = asyncio.run(main())
    assert direct == "met in asyncio (thread=direct)"
    for i, report in enumerate(reports):
        check_met(env, report, f"a{i}", "asyncio")


# ── Load failures ────────────────────────────────────────────────


def test_load_failures_are_listed_and_never_raise_out_of_host(env: Env) -> None:
    needy = codumentor_plugin(
        env.plugins,
        f"needy-{env.tag}",
        f"codu_needy_{env.tag}",
        """
        class Probe:
            def __init__(self, config=None, **kwargs):
                pass

            async def register(self, bus):
                bus.on("onPromptAssemble", lambda agent, ctx, payload: None)
        """,
        "dependencies: [not-installed-anywhere]\n",
    )
    broken_key = f"broken{env.tag}"
    felix_tree(
        env.plugins,
        "felix-broken",
        {broken_key: f"felix_broken_{env.tag}:register"},
        f"felix_broken_{env.tag}",
        """
        import not_installed_anywhere_either

        def register(registry):
            pass
        """,
    )
    env.enabled += [needy.name, broken_key]
    env.write_config()
    host = env.host()  # never raises for a plugin's failure
    plugins = {p["key"]: p for p in host.plugins()}
    assert plugins[needy.name]["status"] == "failed"
    assert plugins[needy.name]["loaded"] is False
    assert plugins[needy.name]["dependencies"] == ["not-installed-anywhere"]
    assert plugins[needy.name]["error"] == (
        "dependency 'not-installed-anywhere' is not loaded (no plugin with that key was found)"
    )
    broken = plugins[broken_key]
    assert (broken["status"], broken["loaded"], broken["dialect"]) == ("failed", False, "felix")
    assert broken["error"] == "ModuleNotFoundError: No module named 'not_installed_anywhere_either'"
    assert broken["failure"]["type"] == "ModuleNotFoundError"
    assert broken["failure"].get("location", "").endswith("__init__.py:2")
    assert broken["tools"] == [] and broken["hooks"] == []
    # The other plugins load and work.
    assert plugins[env.felix_key]["loaded"] and plugins[env.codu_key]["loaded"]
    assert host.call_tool("felix_wc", {"text": "still here"}) == "2 words (thread=) [checked]"


TWIN = """
    from felix.tools.types import define_tool


    class Which:
        def register_tools(self, register):
            register("twin_which", lambda: define_tool(name="twin_which", description="Which twin", handler=lambda args: "%s"))


    def register(registry):
        registry.register_plugin(Which())
"""


def test_a_felix_package_already_imported_from_elsewhere_fails_the_load(tmp_path: Path) -> None:
    in_process_only("it checks the caller's own sys.modules; an isolated plugin imports its felix package in its worker")
    # Two homes whose Felix trees hold different packages of one name: the
    # second Host must not silently run the first one's module.
    tag = uuid.uuid4().hex[:8]
    key, package = f"twin{tag}", f"felix_twin_{tag}"
    trees = {}
    for name in ("one", "two"):
        home = tmp_path / name
        trees[name] = felix_tree(home / "plugins", "twin", {key: f"{package}:register"}, package, TWIN % name)
        (home / "config.json").write_text(json.dumps({"plugins": {"enabled": [key]}}))
    quiet = ["command-guard", "disk-cleanup", "tool-audit"]
    assert plughost.Host(home=tmp_path / "one", disable=quiet).call_tool("twin_which") == "one"
    second = plughost.Host(home=tmp_path / "two", disable=quiet)
    twin = {p["key"]: p for p in second.plugins()}[key]
    assert (twin["status"], twin["loaded"]) == ("failed", False)
    first_file = os.path.realpath(trees["one"] / "src" / package / "__init__.py")
    assert twin["error"] == (
        f"ImportError: module '{package}' is already imported from {first_file}, not from this plugin's "
        f"{trees['two'] / 'src'}: another plugin (or another Host in this process) provides a package of the "
        "same name; rename one of them"
    )
    assert second.call_tool("twin_which") == "Error: Tool 'twin_which' not found"
    # Another Host over the same tree shares its module: that is the same code.
    assert plughost.Host(home=tmp_path / "one", disable=quiet).call_tool("twin_which") == "one"


def test_a_felix_entry_point_in_a_package_imported_elsewhere_runs_none_of_its_code(tmp_path: Path) -> None:
    in_process_only("it checks the caller's own sys.modules; an isolated plugin imports its package in its worker")
    # The second plugin's entry point is a submodule: importing it through
    # the first plugin's package (already in sys.modules) would run that
    # package's submodule. The load fails before any of it runs.
    tag = uuid.uuid4().hex[:8]
    package = f"felix_shadow_{tag}"
    marker = tmp_path / "other-code-ran"
    first_home, second_home = tmp_path / "first", tmp_path / "second"
    felix_tree(first_home / "plugins", "first", {f"first{tag}": f"{package}:register"}, package, "def register(registry):\n    pass\n")
    (first_home / "plugins" / "first" / "src" / package / "entry.py").write_text(
        f"open({str(marker)!r}, 'w').close()\ndef register(registry):\n    pass\n"
    )
    tree = felix_tree(second_home / "plugins", "second", {f"second{tag}": f"{package}.entry:register"}, package, "")
    (tree / "src" / package / "entry.py").write_text("def register(registry):\n    pass\n")
    for home, key in ((first_home, f"first{tag}"), (second_home, f"second{tag}")):
        (home / "config.json").write_text(json.dumps({"plugins": {"enabled": [key]}}))
    quiet = ["command-guard", "disk-cleanup", "tool-audit"]
    first = plughost.Host(home=first_home, disable=quiet)
    assert {p["key"]: p for p in first.plugins()}[f"first{tag}"]["loaded"]
    second = {p["key"]: p for p in plughost.Host(home=second_home, disable=quiet).plugins()}[f"second{tag}"]
    assert second["status"] == "failed"
    assert (second["error"] or "").startswith(f"ImportError: module '{package}' is already imported from "), second["error"]
    assert not marker.exists(), "the other plugin's submodule ran"


CODU_TWIN = """
    class Probe:
        meta = {"name": "%s"}

        def __init__(self, config=None, **kwargs):
            pass

        async def register(self, bus):
            bus.on("onAfterInput", self.seen)

        async def seen(self, agent, ctx, payload):
            return None
"""


def test_a_codumentor_package_is_held_by_the_hosts_that_loaded_it(tmp_path: Path) -> None:
    in_process_only("it checks the caller's own sys.modules; an isolated plugin's package lives in its worker")
    # One process, several Hosts: a top-level package name belongs to the
    # plugin (and directory) that provides it while a Host holding it
    # lives, and is free again once the last one is gone.
    tag = uuid.uuid4().hex[:8]
    key, other_key, package = f"twin{tag}", f"other{tag}", f"codu_twin_{tag}"
    homes = {}
    for name, plugin_key in (("one", key), ("two", key), ("three", other_key)):
        home = tmp_path / name
        codumentor_plugin(home / "plugins", plugin_key, package, CODU_TWIN % plugin_key)
        (home / "config.json").write_text(json.dumps({"plugins": {"enabled": [plugin_key]}}))
        homes[name] = home
    quiet = ["command-guard", "disk-cleanup", "tool-audit"]

    def record(host: plughost.Host, plugin_key: str) -> Any:
        return {p["key"]: p for p in host.plugins()}[plugin_key]

    first = plughost.Host(home=homes["one"], disable=quiet)
    assert record(first, key)["loaded"]
    # The same key from another directory would run the first one's module.
    same_key = record(plughost.Host(home=homes["two"], disable=quiet), key)
    assert (same_key["status"], same_key["loaded"]) == ("failed", False)
    backend_one = homes["one"] / "plugins" / key / "backend"
    backend_two = homes["two"] / "plugins" / key / "backend"
    assert same_key["error"] == (
        f"package '{package}' of plugin '{key}' is already imported from {backend_one} by another host of "
        f"this process; while that host lives, the plugin cannot load from {backend_two}"
    )
    other = record(plughost.Host(home=homes["three"], disable=quiet), other_key)
    assert other["status"] == "failed"
    assert other["error"] == (
        f"package '{package}' is already provided by plugin '{key}'; two Codumentor plugins cannot share a "
        "top-level package name"
    )
    # A second Host over the same plugin shares it; the name stays held
    # until both are gone.
    second = plughost.Host(home=homes["one"], disable=quiet)
    assert record(second, key)["loaded"]
    del first
    gc.collect()
    assert record(plughost.Host(home=homes["three"], disable=quiet), other_key)["status"] == "failed"
    del second
    gc.collect()
    assert package not in sys.modules
    freed = plughost.Host(home=homes["three"], disable=quiet)
    assert record(freed, other_key)["loaded"]


# ── Built-in tools: the CLI's, web_search / web_extract included ─

WEB_BACKEND = """
    from flowly.agent.tools.web_providers.base import WebSearchProvider


    class Canned(WebSearchProvider):
        @property
        def name(self):
            return "canned"

        def is_available(self):
            return True

        async def search(self, query, limit=5):
            return {"success": True, "data": {"web": [
                {"title": f"About {query}", "url": "https://canned.example/1", "description": "first"},
            ][:limit]}}


    def register(ctx):
        ctx.register_web_search_provider(Canned())
"""


def test_builtin_tools_include_the_web_tools_as_in_the_cli(tmp_path: Path) -> None:
    in_process_only("a web search provider registered in a worker is not handed to the host's provider registry yet (docs/isolation.md, parity gaps)")
    home = tmp_path / "home"
    backend = home / "plugins" / "web-canned"
    backend.mkdir(parents=True)
    (backend / "plugin.yaml").write_text("name: web-canned\nkind: backend\nprovides_web_providers: [canned]\n")
    (backend / "__init__.py").write_text(textwrap.dedent(WEB_BACKEND))
    (home / "config.json").write_text(
        json.dumps({"plugins": {"enabled": ["web-canned"]}, "tools": {"web": {"search": {"backend": "canned"}}}})
    )
    host = plughost.Host(home=home, builtin_tools=True)
    tools = {t["name"]: t for t in host.tools()}
    assert tools["web_search"]["plugin"] == tools["web_extract"]["plugin"] == "builtin"
    # The same built-in tools as the CLI's (its `tools list` has no
    # `delegate`, which only an agent can run).
    exe = Path(sys.executable).with_name("plughost")
    listed = subprocess.run(
        [str(exe), "--home", str(home), "tools", "list", "--json"], capture_output=True, text=True, check=True
    )
    cli_builtins = {t["name"] for t in json.loads(listed.stdout) if t["plugin"] == "builtin"}
    wheel_builtins = {name for name, t in tools.items() if t["plugin"] == "builtin"}
    assert wheel_builtins - cli_builtins == {"delegate"}
    assert cli_builtins <= wheel_builtins
    # web_search goes to the configured provider and is formatted as Flowly does.
    assert host.call_tool("web_search", {"query": "rust", "count": 1}) == (
        "Results for: rust\n\n1. About rust\n   https://canned.example/1\n   first"
    )
    # web_extract refuses a loopback address without fetching it (Flowly's rule).
    refused = json.loads(host.call_tool("web_extract", {"urls": ["http://127.0.0.1:9/page"]}))
    assert refused["results"][0]["error"] == "IP 127.0.0.1 is in blocked private range 127.0.0.0/8"
    # An agent offers them while their provider is available.
    (tmp_path / "s.yaml").write_text("turns:\n  - say: ok\n")
    agent = plughost.Agent(host, model=f"scripted:{tmp_path / 's.yaml'}")
    report = run_turn(agent, "hi", "web")
    assert {"web_search", "web_extract"} <= set(report["model_calls"][0]["tools"])
    # Without builtin_tools there are none.
    assert plughost.Host(home=home).call_tool("web_search", {"query": "x"}) == "Error: Tool 'web_search' not found"


# ── An entry-point distribution pip-installed into a fresh virtualenv ─

DIST_MODULE = """
from felix.tools.types import define_tool


class Shout:
    def register_tools(self, register):
        register("dist_shout", lambda: define_tool(
            name="dist_shout", description="Shout a text",
            args_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            handler=lambda args, ctx: args["text"].upper() + "!"))


def register(registry):
    registry.register_plugin(Shout())
    registry.register_after_tool(
        lambda call, result, is_error, ctx: {"content": f"{result} (via {ctx['thread_id']})"} if call["name"] == "dist_shout" else None
    )
"""


def build_wheel(out: Path, name: str, version: str, package: str, files: dict[str, str], entry_points: str) -> Path:
    """A `.whl` written with zipfile (no `wheel` package here): the package,
    and its dist-info's METADATA, WHEEL, entry_points.txt and RECORD."""
    dist_info = f"{package}-{version}.dist-info"
    contents = {f"{package}/{path}": text for path, text in files.items()}
    contents[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: Shouts, from an installed distribution\n"
    contents[f"{dist_info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: plughost-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    contents[f"{dist_info}/entry_points.txt"] = entry_points
    wheel = out / f"{package}-{version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in contents.items():
            data = text.encode()
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


def test_a_felix_distribution_pip_installed_into_a_virtualenv_is_an_entry_point(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    package = f"felix_shout_{tag}"
    wheel = build_wheel(
        tmp_path,
        f"felix-shout-{tag}",
        "2.0.1",
        package,
        {"__init__.py": DIST_MODULE},
        # A second entry point whose module is not in the distribution.
        f"[felix.plugins]\nshout = {package}:register\nbroken = {package}.missing:register\n",
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # A real pip install into the fresh virtualenv's interpreter (pip of
    # this interpreter, `--python`: the virtualenv has none of its own).
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-index", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert (site / f"{package}-2.0.1.dist-info" / "entry_points.txt").is_file()

    home = tmp_path / "home"
    home.mkdir()
    bundled = tmp_path / "no-bundled"
    bundled.mkdir()
    exe = Path(sys.executable).with_name("plughost")
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PLUGHOST_LOG", "VIRTUAL_ENV")}
    base.update(PLUGHOST_HOME=str(home), PLUGHOST_BUNDLED_DIR=str(bundled))
    active = dict(base, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{base.get('PATH', '')}")

    listed = subprocess.run([str(exe), "plugins", "list", "--json"], capture_output=True, text=True, env=active, timeout=120)
    assert listed.returncode == 0, listed.stderr
    records = {p["key"]: p for p in json.loads(listed.stdout)}
    shout = records["shout"]
    assert shout["source"] == "entrypoint"
    assert shout["dialect"] == "felix"
    assert shout["entry"] == f"{package}:register"
    assert shout["version"] == "2.0.1"
    assert shout["description"] == "Shouts, from an installed distribution"
    assert (shout["status"], shout["enabled"], shout["error"]) == ("loaded", True, None), shout
    assert Path(shout["path"]).resolve() == site.resolve()
    assert shout["tools"] == ["dist_shout"]
    broken = records["broken"]
    assert (broken["source"], broken["status"], broken["loaded"]) == ("entrypoint", "failed", False)
    assert broken["error"] == f"ModuleNotFoundError: No module named '{package}.missing'"

    script = tmp_path / "shout.yaml"
    script.write_text(
        "turns:\n  - tool_calls:\n      - name: dist_shout\n        args: {text: hello}\n  - say: 'heard: {tool_results}'\n"
    )
    ran = subprocess.run(
        [str(exe), "run", "--json", "--model", "scripted", "--script", str(script), "--session", "venv", "shout it"],
        capture_output=True,
        text=True,
        env=active,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["completed"] is True and report["hook_errors"] == []
    assert [(c["name"], c["result"], c["outcome"]) for c in report["tool_calls"]] == [
        ("dist_shout", "HELLO! (via venv)", "ok")
    ]
    assert "dist_shout" in report["model_calls"][0]["tools"]

    # Outside the virtualenv the distribution is not there.
    outside = subprocess.run([str(exe), "plugins", "list", "--json"], capture_output=True, text=True, env=base, timeout=120)
    assert "shout" not in {p["key"] for p in json.loads(outside.stdout)}
    # Disabled by key, it is listed but not loaded.
    (home / "config.json").write_text(json.dumps({"plugins": {"disabled": ["shout"]}}))
    disabled = subprocess.run([str(exe), "plugins", "list", "--json"], capture_output=True, text=True, env=active, timeout=120)
    assert {p["key"]: p for p in json.loads(disabled.stdout)}["shout"]["status"] == "disabled"
