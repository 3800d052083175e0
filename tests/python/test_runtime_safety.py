"""The wheel is safe from any thread and any loop, and contains plugin faults.

Each test here reproduces a failure of the embedding layer (threads that
abort the process at exit, lost completions, a plugin killing the runtime's
loop, awaitables that run before they are awaited, hosts sharing a home,
text-classified outcomes, an abort at interpreter exit) and checks it stays
fixed. Process-level failures run in subprocesses, each checked for a clean
exit; concurrency is proven by overlap (events, timestamps), never by
wall-clock bounds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import plughost
from conftest import in_process_only, write_plugin

SAFETY_PLUGIN = """
import asyncio
import os
import sys
import threading

from flowly.profile import get_flowly_home

import time

MARKS = []
SPANS = []
ARRIVED = []
CANCELLED = threading.Event()
CANCELLABLE_STARTED = threading.Event()
HOGGING = threading.Event()
BACKGROUND = threading.Event()
GATE = threading.Event()
GATED_STARTED = threading.Event()
RELEASED = threading.Event()
CHECK_SAW = []

def register(ctx):
    def greet(name: str = "x") -> str:
        return f"Hello, {name}!"

    async def anap(seconds: float = 0.0):
        await asyncio.sleep(seconds)
        return "napped"

    async def timed_nap(seconds: float = 0.0, together: int = 0):
        started = time.monotonic()
        # With `together`, wait until that many calls have started: calls
        # that do not overlap never get there, and say so. Overlap is then
        # proven by what happened, not by the nap outlasting the dispatch.
        ARRIVED.append(started)
        while len(ARRIVED) < together:
            if time.monotonic() > started + 60:
                return "alone"
            await asyncio.sleep(0.005)
        await asyncio.sleep(seconds)
        SPANS.append((started, time.monotonic()))
        return "napped"

    async def cancellable(seconds: float = 30.0):
        CANCELLABLE_STARTED.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            CANCELLED.set()
            raise
        return "not cancelled"

    def was_cancelled():
        return str(CANCELLED.wait(10))

    async def hog(seconds: float = 0.5):
        await asyncio.sleep(0)  # on the runtime's loop thread from here on
        HOGGING.set()
        time.sleep(seconds)     # keeps the loop busy running this callback
        return "hogged"

    def hogging():
        return str(HOGGING.wait(10))

    async def spawn_background():
        async def background():
            BACKGROUND.set()
        asyncio.get_running_loop().create_task(background())
        return "spawned"

    def background_ran():
        return str(BACKGROUND.wait(5))

    async def exit_after_await(code: int = 3):
        await asyncio.sleep(0)
        raise SystemExit(code)

    async def interrupt_after_await():
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    def errors_found():
        return "Errors found: 0"

    def home():
        return str(get_flowly_home())

    def home_from_thread():
        out = []
        t = threading.Thread(target=lambda: out.append(str(get_flowly_home())))
        t.start()
        t.join()
        return out[0]

    def mark(tag: str = ""):
        MARKS.append(tag)
        return str(len(MARKS))

    async def amark(tag: str = ""):
        MARKS.append(tag)
        return str(len(MARKS))

    def current_task_name():
        return "sync"

    async def task_identity():
        await asyncio.sleep(0)
        return str(id(asyncio.current_task()))

    ctx.register_tool("greet", {"type": "object", "properties": {"name": {"type": "string"}}}, greet)
    ctx.register_tool("anap", {"type": "object", "properties": {"seconds": {"type": "number"}}}, anap)
    ctx.register_tool("exit_after_await", {"type": "object", "properties": {"code": {"type": "integer"}}}, exit_after_await)
    ctx.register_tool("interrupt_after_await", {}, interrupt_after_await)
    ctx.register_tool("errors_found", {}, errors_found)
    ctx.register_tool("home", {}, home)
    ctx.register_tool("home_from_thread", {}, home_from_thread)
    ctx.register_tool("mark", {"type": "object", "properties": {"tag": {"type": "string"}}}, mark)
    ctx.register_tool("amark", {"type": "object", "properties": {"tag": {"type": "string"}}}, amark)
    ctx.register_tool("task_identity", {}, task_identity)
    ctx.register_tool("timed_nap", {"type": "object", "properties": {"seconds": {"type": "number"}, "together": {"type": "integer"}}}, timed_nap)
    ctx.register_tool("spans", {}, lambda: repr(SPANS))
    ctx.register_tool("cancellable", {"type": "object", "properties": {"seconds": {"type": "number"}}}, cancellable)
    ctx.register_tool("was_cancelled", {}, was_cancelled)

    async def cancellable_started():
        return str(CANCELLABLE_STARTED.is_set())

    ctx.register_tool("cancellable_started", {}, cancellable_started)
    async def gated():
        GATED_STARTED.set()
        while not GATE.is_set():
            await asyncio.sleep(0.005)
        return "through"

    def slow_check():
        # The awaited `gated` call answers now, while this check's caller
        # (a blocking call_tool) waits for the check; its caller, once
        # answered, releases the check.
        GATE.set()
        CHECK_SAW.append(RELEASED.wait(5))
        return True

    def release_check():
        RELEASED.set()
        return "released"

    ctx.register_tool("gated", {}, gated)
    ctx.register_tool("release_check", {}, release_check)
    ctx.register_tool("check_saw", {}, lambda: repr(CHECK_SAW))
    ctx.register_tool("gated_started", {}, lambda: str(GATED_STARTED.wait(10)))
    ctx.register_tool("checked_late", {}, lambda: "checked", check_fn=slow_check)
    ctx.register_tool("hog", {"type": "object", "properties": {"seconds": {"type": "number"}}}, hog)
    ctx.register_tool("hogging", {}, hogging)
    ctx.register_tool("spawn_background", {}, spawn_background)
    ctx.register_tool("background_ran", {}, background_ran)
"""


def make_home(root: Path) -> Path:
    home = root / "home"
    write_plugin(home / "plugins", "safety", SAFETY_PLUGIN)
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["safety"]}}))
    return home


@pytest.fixture
def safety_home(tmp_path: Path) -> Path:
    return make_home(tmp_path)


@pytest.fixture
def host(safety_home: Path) -> plughost.Host:
    return plughost.Host(home=safety_home, disable=["command-guard", "disk-cleanup", "tool-audit"])


def run_script(source: str, home: Path, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``source`` in a fresh interpreter with HOME_DIR set; the result."""
    script = f"HOME_DIR = {str(home)!r}\n" + textwrap.dedent(source)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def assert_clean(proc: subprocess.CompletedProcess[str], expected: str = "done") -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert proc.stdout.strip().endswith(expected), proc.stdout
    assert "Fatal Python error" not in proc.stderr, proc.stderr


# ── 1. threads Python owns ───────────────────────────────────────


THREADS_SCRIPT = """
import asyncio, concurrent.futures, threading
import plughost

host = plughost.Host(home=HOME_DIR, disable=["command-guard", "disk-cleanup", "tool-audit"])
results = []

def work(i):
    results.append(host.call_tool("greet", {"name": str(i)}))
    results.append(host.call_tool("anap", {"seconds": 0}))

threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()

with concurrent.futures.ThreadPoolExecutor(4) as pool:
    results.extend(pool.map(lambda i: host.call_tool("greet", {"name": str(i)}), range(16)))

async def main():
    return await asyncio.gather(*(asyncio.to_thread(host.call_tool, "greet", {"name": "t"}) for _ in range(8)))

results.extend(asyncio.run(main()))
assert len(results) == 16 + 16 + 8, len(results)
assert results.count("napped") == 8
print("done")
"""


def test_threads_python_owns_call_the_wheel_and_exit_cleanly(safety_home: Path) -> None:
    # The abort happened when a thread that had called into plughost exited:
    # a loop of short runs, each checked for a clean exit.
    for _ in range(5):
        assert_clean(run_script(THREADS_SCRIPT, safety_home))


def test_a_threaded_wsgi_server_serves_tool_calls_from_its_worker_threads(host: plughost.Host) -> None:
    from socketserver import ThreadingMixIn
    from urllib.request import urlopen
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    class ThreadingServer(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    def app(environ, start_response):  # type: ignore[no-untyped-def]
        name = environ.get("PATH_INFO", "/").strip("/")
        body = host.call_tool("greet", {"name": name}).encode()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [body]

    server = make_server("127.0.0.1", 0, app, server_class=ThreadingServer, handler_class=Quiet)
    port = server.server_address[1]
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            bodies = list(pool.map(lambda i: urlopen(f"http://127.0.0.1:{port}/w{i}", timeout=30).read().decode(), range(24)))
    finally:
        server.shutdown()
        server.server_close()
    assert bodies == [f"Hello, w{i}!" for i in range(24)]


# ── 2. the deferred path never loses a completion ────────────────


def test_blocking_async_calls_from_many_threads_while_the_loop_is_busy_all_return(host: plughost.Host) -> None:
    in_process_only("it counts the caller's runtime's deferred starts; an isolated plugin's handlers run in its worker")
    # 16 threads × 300 calls of an async tool through the blocking API, while
    # a plugin keeps the runtime's loop busy: starts take the deferred path
    # (queued for the loop thread), where a completion used to get lost.
    runtime = sys.modules["_plughost_runtime"]
    deferred_before = runtime.DEFERRED_STARTS
    errors: list[BaseException] = []
    done = []

    def work() -> None:
        try:
            for _ in range(300):
                assert host.call_tool("anap", {"seconds": 0}) == "napped"
            done.append(1)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    hogger = threading.Thread(target=lambda: host.call_tool("hog", {"seconds": 0.5}), daemon=True)
    hogger.start()
    assert host.call_tool("hogging") == "True"
    threads = [threading.Thread(target=work, daemon=True) for _ in range(16)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads + [hogger]:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not errors, errors
    assert len(done) == 16, "a call never returned (lost completion)"
    assert runtime.DEFERRED_STARTS > deferred_before, "the deferred path was exercised"


def test_work_an_eager_step_schedules_runs_without_another_call(host: plughost.Host) -> None:
    assert host.call_tool("spawn_background") == "spawned"
    assert host.call_tool("background_ran") == "True", "the task the step created ran"


def test_a_blocking_call_inside_an_awaited_call_runs_and_one_on_the_runtime_loop_is_refused(safety_home: Path) -> None:
    in_process_only(
        "it calls back from a handler running on plughost's own event loop in the caller's process; an isolated handler runs in its worker"
    )
    host = plughost.Host(home=safety_home, disable=["command-guard", "disk-cleanup", "tool-audit"])

    def outer() -> str:
        # A sync handler running inside `await host.acall_tool(...)`.
        return host.call_tool("anap", {"seconds": 0.01})

    async def on_the_loop() -> str:
        await asyncio.sleep(0)
        return host.call_tool("anap", {"seconds": 0.01})

    host.register_tool("outer", {}, outer)
    host.register_tool("on_the_loop", {}, on_the_loop)

    async def main() -> str:
        return await host.acall_tool("outer")

    assert asyncio.run(main()) == "napped"
    results: list[str] = []
    caller = threading.Thread(target=lambda: results.append(host.call_tool("on_the_loop")), daemon=True)
    caller.start()
    caller.join(timeout=60)
    assert results, "the nested blocking call hung"
    assert "blocking plughost call was made from inside plughost's own event loop" in results[0], results
    assert host.call_tool("anap", {"seconds": 0.01}) == "napped"


# ── 3. a plugin's SystemExit / KeyboardInterrupt ─────────────────


def test_system_exit_after_a_suspension_fails_the_call_and_the_loop_keeps_serving(host: plughost.Host) -> None:
    assert host.call_tool("exit_after_await", {"code": 3}) == "Error executing exit_after_await: SystemExit: 3"
    assert host.call_tool("interrupt_after_await") == "Error executing interrupt_after_await: KeyboardInterrupt"
    # The runtime's loop still serves suspending calls.
    assert host.call_tool("anap", {"seconds": 0.01}) == "napped"

    async def awaited() -> list[str]:
        return [
            await host.acall_tool("exit_after_await", {"code": 4}),
            await host.acall_tool("interrupt_after_await"),
            await host.acall_tool("anap", {"seconds": 0.01}),
        ]

    assert asyncio.run(awaited()) == [
        "Error executing exit_after_await: SystemExit: 4",
        "Error executing interrupt_after_await: KeyboardInterrupt",
        "napped",
    ]


# ── 4. acall_tool is a real awaitable ────────────────────────────


def test_acall_tool_works_under_asyncio_run_and_does_nothing_until_awaited(host: plughost.Host) -> None:
    assert asyncio.run(host.acall_tool("greet", {"name": "run"})) == "Hello, run!"
    before = host.call_tool("mark", {"tag": "probe"})
    never = host.acall_tool("mark", {"tag": "never"})
    del never
    assert host.call_tool("mark", {"tag": "probe"}) == str(int(before) + 1), "an unawaited call ran"

    pending = host.acall_tool("amark", {"tag": "later"})
    assert host.call_tool("mark", {"tag": "probe"}) == str(int(before) + 2)
    assert asyncio.run(pending) == str(int(before) + 3)
    with pytest.raises(RuntimeError, match="already awaited"):
        asyncio.run(pending)


def test_acall_tool_runs_inside_the_callers_task_and_on_a_loop_in_another_thread(host: plughost.Host) -> None:
    in_process_only(
        "an isolated plugin's coroutine runs in its worker, not in the caller's task"
    )
    async def identity() -> tuple[str, str]:
        return str(id(asyncio.current_task())), await host.acall_tool("task_identity")

    mine, theirs = asyncio.run(identity())
    assert mine == theirs, "the plugin coroutine ran in the caller's own task"

    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        call = host.acall_tool("anap", {"seconds": 0.01})  # created here, awaited over there
        future = asyncio.run_coroutine_threadsafe(_await(call), loop)
        assert future.result(timeout=30) == "napped"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(timeout=10)
        loop.close()


async def _await(call: object) -> str:
    return await call  # type: ignore[misc]


@pytest.mark.asyncio
async def test_acall_tool_under_pytest_asyncio(host: plughost.Host) -> None:
    first, second = await asyncio.gather(host.acall_tool("anap", {"seconds": 0.01}), host.acall_tool("greet", {"name": "pa"}))
    assert (first, second) == ("napped", "Hello, pa!")


def test_cancelling_the_callers_task_cancels_the_plugin_coroutine(host: plughost.Host) -> None:
    async def main() -> None:
        task = asyncio.ensure_future(host.acall_tool("cancellable", {"seconds": 30}))
        # Cancel once the plugin coroutine is running (not after a guessed
        # 50 ms, which on a busy machine may come before it started).
        deadline = time.monotonic() + 30
        while await host.acall_tool("cancellable_started") != "True":
            assert time.monotonic() < deadline, "the plugin coroutine never started"
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    # In-process the cancellation is seen at once; an isolated call's
    # cancel reaches its worker's task a moment later (Request::Cancel).
    deadline = time.monotonic() + 30
    while host.call_tool("was_cancelled") != "True":
        assert time.monotonic() < deadline, "the plugin coroutine never saw CancelledError"
        time.sleep(0.01)


def test_a_blocking_call_waiting_on_a_check_lets_an_awaited_call_answer(safety_home: Path) -> None:
    # Isolated in both passes: in-process, the check runs on the calling
    # thread and there is no wait to release the GIL for.
    host = plughost.Host(home=safety_home, isolate=["safety"], disable=["command-guard", "disk-cleanup", "tool-audit"])
    # A blocking call takes its first step holding the GIL; isolated, that
    # step waits for the worker to run the tool's check_fn. The awaited
    # call's answer, which comes meanwhile, needs the GIL to wake its task:
    # the blocking wait must let it go, or both stall until the check's
    # bound (10 s) abandons the check.
    answers: list[str] = []

    def await_then_release() -> None:
        answers.append(asyncio.run(host.acall_tool("gated")))
        answers.append(host.call_tool("release_check"))

    awaiting = threading.Thread(target=await_then_release)
    awaiting.start()
    try:
        assert host.call_tool("gated_started") == "True"
        assert host.call_tool("checked_late") == "checked"
    finally:
        awaiting.join(30)
    assert answers == ["through", "released"]
    assert host.call_tool("check_saw") == "[True]", "the awaited call was answered only after the check"


@pytest.mark.parametrize("calls", [100, 1000])
def test_many_concurrent_acalls_overlap_and_the_interpreter_exits_cleanly(safety_home: Path, calls: int) -> None:
    script = f"""
import asyncio, ast
import plughost

host = plughost.Host(home=HOME_DIR, disable=["command-guard", "disk-cleanup", "tool-audit"])
host.plugins()

async def main():
    results = await asyncio.gather(*(host.acall_tool("timed_nap", {{"seconds": 0.05, "together": {calls}}}) for _ in range({calls})))
    assert results == ["napped"] * {calls}

asyncio.run(main())
spans = ast.literal_eval(host.call_tool("spans"))
assert len(spans) == {calls}
# Every call had started before the first one finished: they overlapped.
assert max(start for start, _ in spans) < min(end for _, end in spans), spans[:3]
print("done")
"""
    # The abort at exit was intermittent (2-3 in 40): several short runs.
    for _ in range(4):
        assert_clean(run_script(script, safety_home))


# ── 5. hosts with their own homes ────────────────────────────────


def test_two_hosts_in_one_process_each_see_their_own_home(tmp_path: Path) -> None:
    first = make_home(tmp_path / "one")
    second = make_home(tmp_path / "two")
    host1 = plughost.Host(home=first, disable=["command-guard", "disk-cleanup", "tool-audit"])
    host2 = plughost.Host(home=second, disable=["command-guard", "disk-cleanup", "tool-audit"])
    host1.plugins(), host2.plugins()
    assert host1.call_tool("home") == str(first)
    assert host2.call_tool("home") == str(second)
    assert host1.call_tool("home_from_thread") == str(first)
    assert host2.call_tool("home_from_thread") == str(second)


def test_a_dropped_host_unloads_its_plugin_modules(tmp_path: Path) -> None:
    in_process_only(
        "it checks the caller's own sys.modules; an isolated plugin's modules live in its worker"
    )
    home = make_home(tmp_path)
    before = set(sys.modules)
    host = plughost.Host(home=home, disable=["command-guard", "disk-cleanup", "tool-audit"])
    host.plugins()
    loaded = {name for name in set(sys.modules) - before if name.startswith("_plughost_plugins.")}
    assert loaded, "the plugin is imported as its own package"
    del host
    import gc

    gc.collect()
    assert not loaded & set(sys.modules), "the host's plugin packages left sys.modules"


# ── 6. outcomes are typed, not read from the text ────────────────


def test_a_result_that_starts_with_error_is_a_success(safety_home: Path) -> None:
    exe = Path(sys.executable).with_name("plughost")
    proc = subprocess.run(
        [str(exe), "--home", str(safety_home), "tools", "call", "errors_found"], capture_output=True, text=True
    )
    assert (proc.returncode, proc.stdout) == (0, "Errors found: 0\n"), proc.stderr


# ── 7. plugin failures keep their traceback ──────────────────────


def test_doctor_shows_where_a_broken_plugin_failed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    broken = write_plugin(
        home / "plugins",
        "broken",
        """
        def helper():
            return undefined_name

        helper()

        def register(ctx):
            pass
        """,
    )
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["broken"]}}))
    exe = Path(sys.executable).with_name("plughost")
    doctor = subprocess.run([str(exe), "--home", str(home), "plugins", "doctor", "--json"], capture_output=True, text=True)
    assert doctor.returncode == 1
    entry = next(p for p in json.loads(doctor.stdout)["plugins"] if p["key"] == "broken")
    assert entry["error"] == "NameError: name 'undefined_name' is not defined"
    assert entry["location"] == f"{broken / '__init__.py'}:3"
    assert "Traceback (most recent call last)" in entry["traceback"]

    text = subprocess.run([str(exe), "--home", str(home), "plugins", "doctor"], capture_output=True, text=True)
    assert f"at: {broken / '__init__.py'}:3" in text.stdout

    verbose = subprocess.run([str(exe), "-v", "--home", str(home), "plugins", "list"], capture_output=True, text=True)
    assert "Traceback (most recent call last)" in verbose.stderr, verbose.stderr
    quiet = subprocess.run([str(exe), "--home", str(home), "plugins", "list"], capture_output=True, text=True)
    assert "NameError" in quiet.stderr and "Traceback" not in quiet.stderr, quiet.stderr


# ── 10. a directory named flowly is not Flowly ───────────────────


def test_an_unrelated_flowly_directory_on_sys_path_is_not_taken_for_flowly(safety_home: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "flowly").mkdir(parents=True)
    proc = run_script(
        """
        import sys
        sys.path.insert(0, ".")
        import plughost
        host = plughost.Host(home=HOME_DIR, disable=["command-guard", "disk-cleanup", "tool-audit"])
        assert host.call_tool("greet", {"name": "ns"}) == "Hello, ns!"
        print("done")
        """,
        safety_home,
        cwd=work,
    )
    assert_clean(proc)


# ── the runtime's loop and the host's lazy build ─────────────────


def test_a_plugin_that_stops_the_runtime_loop_does_not_strand_other_calls(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_plugin(
        home / "plugins",
        "stopper",
        """
        import asyncio
        import threading

        SLOW_STARTED = threading.Event()

        def register(ctx):
            async def stop_loop():
                for _ in range(1000):  # until the slow call is in flight
                    if SLOW_STARTED.is_set():
                        break
                    await asyncio.sleep(0.01)
                asyncio.get_running_loop().stop()
                return "stopped"

            async def slow():
                SLOW_STARTED.set()
                await asyncio.sleep(0.3)
                return "slow done"

            ctx.register_tool("stop_loop", {}, stop_loop)
            ctx.register_tool("slow", {}, slow)
        """,
    )
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["stopper"]}}))
    host = plughost.Host(home=home, disable=["command-guard", "disk-cleanup", "tool-audit"])
    results: list[str] = []
    worker = threading.Thread(target=lambda: results.append(host.call_tool("slow")))
    worker.start()
    assert host.call_tool("stop_loop") == "stopped"
    worker.join(timeout=30)
    assert results == ["slow done"], "the call in flight finished on the loop that kept serving"
    assert host.call_tool("slow") == "slow done"


def test_many_threads_using_a_fresh_host_first_load_its_plugins_once(safety_home: Path) -> None:
    in_process_only(
        "it counts the plugin's imports in the caller's own sys.modules; an isolated plugin is imported in its worker"
    )
    before = {name for name in sys.modules if name.startswith("_plughost_plugins.")}
    host = plughost.Host(home=safety_home, disable=["command-guard", "disk-cleanup", "tool-audit"])
    barrier = threading.Barrier(8)

    def first_use(_: int) -> str:
        barrier.wait()
        return host.call_tool("greet", {"name": "first"})

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(first_use, range(8))) == ["Hello, first!"] * 8
    loaded = {name for name in sys.modules if name.startswith("_plughost_plugins.")} - before
    # One package per plugin (the bundled web backends load too).
    plugins = [name.rsplit("__", 1)[0] for name in loaded]
    assert len(plugins) == len(set(plugins)) and "_plughost_plugins.safety" in plugins, loaded


# ── hostile values through the Python API ───────────────────────


def test_cyclic_and_over_deep_arguments_are_refused_not_a_crash(host: plughost.Host) -> None:
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    with pytest.raises(plughost.PlughostError, match="contains itself"):
        host.call_tool("greet", cyclic)
    deep: list[object] = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(plughost.PlughostError, match="nests deeper than 128 levels"):
        host.call_tool("greet", {"name": deep})
    with pytest.raises(plughost.PlughostError, match="contains itself"):
        host.acall_tool("greet", cyclic)
    assert host.call_tool("greet", {"name": "still fine"}) == "Hello, still fine!"


def test_a_cyclic_schema_registered_directly_is_refused_at_registration(safety_home: Path) -> None:
    host = plughost.Host(home=safety_home, disable=["command-guard", "disk-cleanup", "tool-audit"])
    schema: dict[str, object] = {"type": "object"}
    schema["properties"] = {"a": schema}
    with pytest.raises(ValueError, match="register_tool\\('loop'\\): schema is not JSON-like"):
        host.register_tool("loop", schema, lambda **kw: "x")


# ── isolation from the Python API ────────────────────────────────


def test_an_isolated_plugin_runs_in_a_worker_and_its_crash_fails_only_its_call(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_plugin(
        home / "plugins",
        "crashy",
        """
        import ctypes, os

        def register(ctx):
            ctx.register_tool("pid", {}, lambda: str(os.getpid()))
            ctx.register_tool("segv", {}, lambda: ctypes.string_at(0))
        """,
    )
    (home / "config.json").write_text(json.dumps({"plugins": {"enabled": ["crashy"]}}))
    host = plughost.Host(home=home, disable=["command-guard", "disk-cleanup", "tool-audit"], isolate=["crashy"])
    assert {p["key"]: p["isolated"] for p in host.plugins()}["crashy"] is True
    worker = host.call_tool("pid")
    assert worker.isdigit() and int(worker) != os.getpid(), "the tool ran in a worker process"
    assert host.call_tool("segv") == "Error executing segv: plugin 'crashy' crashed (SIGSEGV)"
    assert host.call_tool("pid").isdigit(), "the worker restarted for the next call"


def test_a_call_driven_by_hand_ends_in_stop_iteration_with_its_value(host: plughost.Host) -> None:
    in_process_only(
        "an isolated call waits on its worker, so its awaitable needs a running event loop; driven by hand (send(None)) it is refused"
    )
    # What `await` does through the C slot on 3.11, and through `send` and
    # `__next__` on 3.12 and later: both end the same way.
    call = host.acall_tool("greet", {"name": "hand"})
    with pytest.raises(StopIteration) as stopped:
        call.send(None)
    assert stopped.value.value == "Hello, hand!"
    with pytest.raises(RuntimeError, match="already awaited"):
        call.send(None)

    iterator = host.acall_tool("greet", {"name": "next"}).__await__()
    with pytest.raises(StopIteration) as stopped:
        next(iterator)
    assert stopped.value.value == "Hello, next!"

    async def awaited() -> list[str]:
        call = host.acall_tool("greet", {"name": "twice"})
        first = await call
        try:
            await call
        except RuntimeError as error:
            return [first, str(error)]
        return [first, "awaited twice without an error"]

    assert asyncio.run(awaited()) == ["Hello, twice!", "cannot reuse an already awaited plughost call"]
