//! An isolated plugin's replies read on a runtime's reactor
//! (`plughost::isolation::read_replies_on`, as the CLI's `serve`, `run`,
//! `chat` and `mcp` do) instead of a reader thread per worker: calls are
//! answered, a crash is noticed and the worker restarts from the runtime's
//! own threads while other calls wait on them, and once that runtime has
//! ended a thread reads on, for the running workers and for new ones; a
//! runtime let go of, or one whose threads plughost did not mark, reads
//! no replies.
//! A process of its own for each test (`alone!`): the runtime named is the process's.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::common::{home_with, no_bundled, write_plugin};
use plughost::isolation::WorkerCommand;
use plughost::plugins::config::Isolation;
use plughost::Host;
use serde_json::json;

const BOUND: Duration = Duration::from_secs(120);

const PLUGIN: &str = r#"
import os
def register(ctx):
    ctx.register_tool("echo", {"type": "object", "properties": {"text": {"type": "string"}}},
                      lambda text="": "echo:" + text)
    ctx.register_tool("exit3", {}, lambda: os._exit(3))
"#;

/// The names of this process's threads (as the kernel keeps them: 15 bytes).
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .collect()
}

fn reader_threads() -> usize {
    thread_names()
        .iter()
        .filter(|n| n.starts_with("plughost-isolat"))
        .count()
}

#[test]
fn replies_are_read_on_the_runtime_and_on_a_thread_once_it_ended() {
    crate::alone!(replies_are_read_on_the_runtime_and_on_a_thread_once_it_ended);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        case();
        let _ = tx.send(());
    });
    match rx.recv_timeout(BOUND) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the case did not finish within {BOUND:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the case failed (see above)"),
    }
}

fn case() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(plughost::runtime::thread_started)
        .enable_all()
        .build()
        .unwrap();
    // Kept to the end: workers started after the runtime ended are named
    // to it still, and get a thread.
    let replies = plughost::isolation::read_replies_on(runtime.handle().clone());

    let home = home_with(&["echoer"]);
    write_plugin(
        &home.path().join("plugins"),
        "echoer",
        "name: echoer\n",
        &[("__init__.py", PLUGIN)],
    );
    let bundled = no_bundled();
    let start_host = || {
        Arc::new(
            Host::builder()
                .home(home.path())
                .bundled_dir(bundled.path())
                .worker_command(WorkerCommand::binary(env!("CARGO_BIN_EXE_plughost")))
                .isolate(Isolation::All)
                .isolation_breaker(10, Duration::from_secs(60))
                .build()
                .unwrap(),
        )
    };
    // Loaded on this thread, outside the runtime: its reply to the load is
    // read on the runtime all the same.
    let host = start_host();
    assert!(host.plugins()[0].isolated && host.plugins()[0].loaded);
    assert_eq!(reader_threads(), 0, "threads: {:?}", thread_names());

    // Calls from the runtime's tasks, eight at once.
    let calls = |label: &'static str| {
        let host = host.clone();
        runtime.block_on(async move {
            let tasks: Vec<_> = (0..8)
                .map(|i| {
                    let host = host.clone();
                    tokio::spawn(async move {
                        host.call_tool("echo", json!({"text": format!("{label}{i}")}), "s")
                            .await
                            .text
                    })
                })
                .collect();
            let mut answers = Vec::new();
            for task in tasks {
                answers.push(task.await.unwrap());
            }
            answers
        })
    };
    let expected =
        |label: &str| -> Vec<String> { (0..8).map(|i| format!("echo:{label}{i}")).collect() };
    assert_eq!(calls("a"), expected("a"));

    // A crash is noticed; the calls after it, all at once on the runtime's
    // two threads, restart the worker (its load waited for on one of them)
    // and are answered.
    let crashed = runtime.block_on(host.call_tool("exit3", json!({}), "s"));
    assert_eq!(
        crashed.text,
        "Error executing exit3: plugin 'echoer' crashed (exit code 3)"
    );
    assert_eq!(calls("b"), expected("b"));
    assert_eq!(reader_threads(), 0, "threads: {:?}", thread_names());

    // The runtime ends: a thread reads the running worker's replies on
    // (named once it runs: waited for).
    drop(runtime);
    wait_for_readers(1);
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let echo = |text: &str| {
        other
            .block_on(host.call_tool("echo", json!({"text": text}), "s"))
            .text
    };
    assert_eq!(echo("c"), "echo:c");
    // And a worker started after it ended too.
    let crashed = other.block_on(host.call_tool("exit3", json!({}), "s"));
    assert!(
        crashed.text.contains("crashed (exit code 3)"),
        "{}",
        crashed.text
    );
    assert_eq!(echo("d"), "echo:d");
    // One reader for the one worker (the dead one's ends after its reaping).
    wait_for_readers(1);
    drop(replies);

    // A runtime named and then let go of: a worker started after reads on
    // a thread of its own, not on that runtime (which still runs).
    let marked = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .on_thread_start(plughost::runtime::thread_started)
            .enable_all()
            .build()
            .unwrap()
    };
    let released = marked();
    drop(plughost::isolation::read_replies_on(
        released.handle().clone(),
    ));
    let second = start_host();
    wait_for_readers(2);
    let answer = released.block_on(second.call_tool("echo", json!({"text": "e"}), "s"));
    assert_eq!(answer.text, "echo:e");

    // A runtime whose threads plughost did not mark cannot move a blocking
    // wait off itself: named, it still leaves each worker a thread.
    let unmarked = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _named = plughost::isolation::read_replies_on(unmarked.handle().clone());
    let third = start_host();
    wait_for_readers(3);
    let answer = unmarked.block_on(third.call_tool("echo", json!({"text": "f"}), "s"));
    assert_eq!(answer.text, "echo:f");
}

/// Wait (at most 5 s) until `count` reader threads run, and fail if not.
fn wait_for_readers(count: usize) {
    for _ in 0..500 {
        if reader_threads() == count {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(reader_threads(), count, "threads: {:?}", thread_names());
}
