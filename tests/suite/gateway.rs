//! The messaging gateway (issue 49): a Hermes platform plugin written in
//! the shape of Hermes's adapters (`gateway_common`) talks to a fake chat
//! service on loopback under `plughost serve`. Two chats at once, replies
//! and tool progress through the adapter, a `pre_gateway_dispatch` policy
//! dropping and rewriting messages (it reads Hermes's `MessageEvent`), a
//! message interrupting its chat's turn, a slash command, an injected
//! message, the adapter's connection dropped and coming back, and the
//! platform plugin's other registrations loading without the gateway.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::gateway_common::{homes, script, sent_to, serve, ChatService, Seen};

const WAIT: Duration = Duration::from_secs(60);

fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Wait (at most [`WAIT`]) until a line of `log` satisfies `done`.
async fn wait_log(log: &Path, what: &str, done: impl Fn(&str) -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !log_lines(log).iter().any(|l| done(l)) {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {:?}",
            log_lines(log)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait (at most [`WAIT`]) until `/healthz` says the platform is connected.
async fn wait_connected(url: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    while !healthz(url).await.contains("platform fakechat connected") {
        assert!(
            std::time::Instant::now() < deadline,
            "healthz never showed it connected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The service, the homes and a running server connected to the service.
struct Setup {
    service: ChatService,
    _homes: (tempfile::TempDir, tempfile::TempDir),
    shared: tempfile::TempDir,
    server: crate::gateway_common::Serve,
}

impl Setup {
    fn log(&self) -> std::path::PathBuf {
        self.shared.path().join("events.log")
    }
}

async fn setup() -> Setup {
    let service = ChatService::start().await;
    let (home, hermes) = homes(service.port);
    let shared = tempfile::tempdir().unwrap();
    let script = script(shared.path());
    let server = serve(
        home.path(),
        hermes.path(),
        &script,
        &shared.path().join("events.log"),
        None,
    );
    service.wait_connected(WAIT, 1).await;
    Setup {
        service,
        _homes: (home, hermes),
        shared,
        server,
    }
}

async fn healthz(url: &str) -> String {
    reqwest::get(format!("{url}/healthz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_chats_at_once_get_their_replies_and_tool_progress_through_the_adapter() {
    let s = setup().await;
    s.service
        .deliver(None, "alice", "alice", "slow apple", "m1");
    s.service.deliver(None, "bob", "bob", "slow pear", "m2");
    let seen = s
        .service
        .wait_for(WAIT, "both replies", |seen| {
            sent_to(seen, "alice").iter().any(|t| t.starts_with("re: "))
                && sent_to(seen, "bob").iter().any(|t| t.starts_with("re: "))
        })
        .await;
    for (chat, word, id) in [("alice", "apple", "m1"), ("bob", "pear", "m2")] {
        let texts = sent_to(&seen, chat);
        // The tool call shown first (Hermes's progress line), then the reply.
        assert_eq!(
            texts[0],
            format!("🔧 lookup: {{\"q\":\"slow {word}\"}}"),
            "{texts:?}"
        );
        assert!(
            texts[1].starts_with(&format!("re: slow {word} "))
                && texts[1].contains(&word.to_uppercase()),
            "{texts:?}"
        );
        // The reply answers the user's message.
        let reply_to = seen.iter().find_map(|x| match x {
            Seen::Sent {
                chat: c,
                text,
                reply_to,
                ..
            } if c == chat && text.starts_with("re: ") => Some(reply_to.clone()),
            _ => None,
        });
        assert_eq!(reply_to, Some(Some(id.to_string())));
    }
    // The two chats' turns overlapped: both tool calls began before either ended.
    let log = log_lines(&s.log());
    let lookups: Vec<&String> = log.iter().filter(|l| l.starts_with("lookup-")).collect();
    assert_eq!(lookups.len(), 4, "{log:?}");
    assert!(
        lookups[0].starts_with("lookup-start") && lookups[1].starts_with("lookup-start"),
        "{lookups:?}"
    );
    assert!(healthz(&s.server.url)
        .await
        .contains("platform fakechat connected"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_policy_sees_the_message_event_and_drops_or_rewrites() {
    let s = setup().await;
    s.service
        .deliver(None, "chat-m", "mallory", "hello there", "m1");
    s.service.deliver(None, "chat-c", "carol", "shout hi", "m2");
    let seen = s
        .service
        .wait_for(WAIT, "carol's reply", |seen| {
            sent_to(seen, "chat-c")
                .iter()
                .any(|t| t.starts_with("re: "))
        })
        .await;
    // Rewritten before the model saw it.
    let reply = sent_to(&seen, "chat-c").pop().unwrap();
    assert!(reply.starts_with("re: HI "), "{reply}");
    // Mallory's message reached the policy with its source, and was dropped.
    let log = log_lines(&s.log());
    assert!(
        log.contains(&"dispatch fakechat chat-m mallory hello there".to_string()),
        "{log:?}"
    );
    // A later message of Mallory's chat is dropped too; Carol's next one is
    // answered: had Mallory's been answered, its reply would come first.
    s.service.deliver(None, "chat-m", "mallory", "again", "m3");
    s.service.deliver(None, "chat-c", "carol", "next", "m4");
    let seen = s
        .service
        .wait_for(WAIT, "carol's second reply", |seen| {
            sent_to(seen, "chat-c").iter().any(|t| t == "re: next")
        })
        .await;
    assert_eq!(sent_to(&seen, "chat-m"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_during_a_turn_interrupts_it_and_runs_next() {
    let s = setup().await;
    s.service.deliver(None, "dave", "dave", "slow first", "m1");
    // Once the first turn's tool runs, a second message arrives.
    let log = s.log();
    wait_log(&log, "the first turn never called its tool", |l| {
        l.starts_with("lookup-start")
    })
    .await;
    s.service.deliver(None, "dave", "dave", "second", "m2");
    let seen = s
        .service
        .wait_for(WAIT, "the second message's reply", |seen| {
            sent_to(seen, "dave")
                .iter()
                .any(|t| t.starts_with("re: second"))
        })
        .await;
    let texts = sent_to(&seen, "dave");
    // The interrupted turn's reply is not sent; the second is answered once.
    assert!(
        !texts.iter().any(|t| t.starts_with("re: slow first")),
        "{texts:?}"
    );
    assert_eq!(
        texts.iter().filter(|t| t.starts_with("re: second")).count(),
        1,
        "{texts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_command_works_from_a_chat() {
    let s = setup().await;
    s.service.deliver(None, "erin", "erin", "/help", "m1");
    let seen = s
        .service
        .wait_for(WAIT, "the command's answer", |seen| {
            !sent_to(seen, "erin").is_empty()
        })
        .await;
    let answer = sent_to(&seen, "erin").remove(0);
    assert!(answer.contains("/help"), "{answer}");
    // No model turn ran: the command never reached the tool.
    assert!(!log_lines(&s.log()).iter().any(|l| l.starts_with("lookup-")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_losing_its_connection_is_reconnected_and_serves_again() {
    let s = setup().await;
    s.service.deliver(None, "frank", "frank", "one", "m1");
    s.service
        .wait_for(WAIT, "the first reply", |seen| {
            sent_to(seen, "frank")
                .iter()
                .any(|t| t.starts_with("re: one"))
        })
        .await;
    s.service.drop_clients();
    s.service
        .wait_for(WAIT, "a new connection", |seen| {
            seen.iter()
                .filter(|x| matches!(x, Seen::Hello { .. }))
                .count()
                == 2
        })
        .await;
    wait_connected(&s.server.url).await;
    s.service.deliver(None, "frank", "frank", "two", "m2");
    let seen = s
        .service
        .wait_for(WAIT, "the reply after reconnecting", |seen| {
            sent_to(seen, "frank").iter().any(|t| t == "re: two")
        })
        .await;
    // Answered over the new connection (client 1), in the same session.
    assert!(seen
        .iter()
        .any(|x| matches!(x, Seen::Sent { conn: 1, text, .. } if text == "re: two")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_messages_reach_gateway_policies_as_platform_api() {
    let s = setup().await;
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v1/chat/completions", s.server.url))
        .header("x-plughost-session", "web-1")
        .json(&json!({"model": "x", "user": "u7", "messages": [{"role": "user", "content": "over http"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let log = log_lines(&s.log());
    assert!(
        log.contains(&"dispatch api web-1 u7 over http".to_string()),
        "{log:?}"
    );
}

#[test]
fn cli_messages_reach_gateway_policies_as_platform_cli_and_the_plugin_loads_whole() {
    let (home, hermes) = homes(1);
    let shared = tempfile::tempdir().unwrap();
    let log = shared.path().join("events.log");
    let script = script(shared.path());
    let bundled = crate::common::no_bundled();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_plughost"))
            .arg("--home")
            .arg(home.path())
            .args(args)
            .env("PLUGHOST_BUNDLED_DIR", bundled.path())
            .env("HERMES_HOME", hermes.path())
            .env("GATEWAY_TEST_LOG", &log)
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        // Isolated, the worker is let go when the command ends, never
        // killed as a crash (the host's platform table holds it weakly).
        assert!(!stderr.contains("crashed"), "{args:?}: {stderr}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    // The platform plugin's tool loads (no gateway runs here).
    let tools = run(&["tools", "list"]);
    assert!(tools.contains("lookup"), "{tools}");
    // Doctor shows the platform and whether serve starts it.
    let doctor = run(&["plugins", "doctor"]);
    assert!(
        doctor.contains("platform fakechat (FakeChat): enabled: plughost serve connects it"),
        "{doctor}"
    );
    let s = script.to_str().unwrap();
    run(&[
        "run",
        "--model",
        "scripted",
        "--script",
        s,
        "from the terminal",
    ]);
    let lines = log_lines(&log);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("dispatch cli ") && l.ends_with(" from the terminal")),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inject_message_reaches_the_chat_through_the_gateway() {
    let s = setup().await;
    s.service.deliver(None, "gina", "gina", "remind me", "m1");
    let seen = s
        .service
        .wait_for(WAIT, "the injected message's reply", |seen| {
            sent_to(seen, "gina").iter().any(|t| t == "re: reminder")
        })
        .await;
    // Injected during the turn, it waited for it: its reply comes after.
    let replies: Vec<String> = sent_to(&seen, "gina")
        .into_iter()
        .filter(|t| t.starts_with("re: "))
        .collect();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert!(replies[0].starts_with("re: remind me "), "{replies:?}");
    assert!(log_lines(&s.log()).contains(&"injected True".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reaction_reaches_gateway_platform_event_hooks_as_hermes_sends_it() {
    let s = setup().await;
    s.service.react("hana", "hana", "s7", "👍");
    let line = "platform-event fakechat reaction {\"chat_id\": \"hana\", \"custom_emoji_ids\": [], \"emojis\": [\"👍\"], \"message_id\": \"s7\", \"thread_id\": null} []";
    wait_log(&s.log(), "no platform event heard", |l| l == line).await;
    // The event is no message: no turn ran, nothing was sent to the chat.
    s.service.deliver(None, "hana", "hana", "hi", "m1");
    let seen = s
        .service
        .wait_for(WAIT, "the reply", |seen| !sent_to(seen, "hana").is_empty())
        .await;
    assert!(
        sent_to(&seen, "hana")[0].starts_with("🔧 lookup"),
        "{:?}",
        sent_to(&seen, "hana")
    );
}

/// An adapter handing over malformed platform events (not a dict, no
/// event type): each is dropped as Hermes's runner drops it, the adapter's
/// call returns, and the next well-formed event and message go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_platform_event_is_dropped_and_the_adapter_goes_on() {
    let s = setup().await;
    s.service.react("ivy", "ivy", "s8", "malformed");
    let line = "platform-event fakechat reaction {\"chat_id\": \"ivy\", \"custom_emoji_ids\": [], \"emojis\": [\"malformed\"], \"message_id\": \"s8\", \"thread_id\": null} []";
    wait_log(&s.log(), "the well-formed event", |l| l == line).await;
    s.service.deliver(None, "ivy", "ivy", "hi", "m1");
    s.service
        .wait_for(WAIT, "the reply", |seen| {
            sent_to(seen, "ivy").iter().any(|t| t.starts_with("re: "))
        })
        .await;
    let events: Vec<String> = log_lines(&s.log())
        .into_iter()
        .filter(|l| l.starts_with("platform-event"))
        .collect();
    assert_eq!(events, [line], "only the well-formed event was heard");
}

/// A chat whose messages reach two replicas (as a platform delivering
/// updates to whichever connection it picks): the second replica's turn
/// waits for the first's lease, runs on its transcript, and the replies
/// go out in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_whose_turns_land_on_two_replicas_is_answered_in_order() {
    let Some(pg) = crate::replicas_common::Pg::start() else {
        return;
    };
    let service = ChatService::start().await;
    let shared = tempfile::tempdir().unwrap();
    let log = shared.path().join("events.log");
    let script = script(shared.path());
    let (home_a, hermes_a) = homes(service.port);
    let (home_b, hermes_b) = homes(service.port);
    let a = serve(home_a.path(), hermes_a.path(), &script, &log, Some(&pg.url));
    let b = serve(home_b.path(), hermes_b.path(), &script, &log, Some(&pg.url));
    let seen = service.wait_connected(WAIT, 2).await;
    // A replica's adapter: in its process, or (isolated) in its worker.
    let parent = |pid: u64| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or_default().to_string();
        after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u64>().ok())
    };
    let conn_of = |pid: u32| {
        seen.iter()
            .find_map(|x| match x {
                Seen::Hello { conn, pid: p }
                    if *p == u64::from(pid) || parent(*p) == Some(u64::from(pid)) =>
                {
                    Some(*conn)
                }
                _ => None,
            })
            .unwrap()
    };
    let (conn_a, conn_b) = (conn_of(a.child.id()), conn_of(b.child.id()));
    service.deliver(Some(conn_a), "hank", "hank", "slow one", "m1");
    wait_log(&log, "replica A never ran its tool", |l| {
        l.starts_with("lookup-start")
    })
    .await;
    service.deliver(Some(conn_b), "hank", "hank", "two", "m2");
    let seen = service
        .wait_for(WAIT, "both replies", |seen| {
            let texts = sent_to(seen, "hank");
            texts.iter().any(|t| t.starts_with("re: slow one"))
                && texts.iter().any(|t| t.starts_with("re: two"))
        })
        .await;
    // Each replica answered its own message, A's before B's.
    let replies: Vec<(usize, String)> = seen
        .iter()
        .filter_map(|x| match x {
            Seen::Sent {
                conn, chat, text, ..
            } if chat == "hank" && text.starts_with("re: ") => Some((*conn, text.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[0].0, conn_a, "{replies:?}");
    assert!(replies[0].1.starts_with("re: slow one"), "{replies:?}");
    assert_eq!(replies[1].0, conn_b, "{replies:?}");
    // B's turn began after A's ended: its tool started after A's finished.
    let lookups: Vec<String> = log_lines(&log)
        .into_iter()
        .filter(|l| l.starts_with("lookup-"))
        .collect();
    let a_end = lookups
        .iter()
        .position(|l| l.starts_with("lookup-end") && l.ends_with("slow one"));
    let b_start = lookups
        .iter()
        .position(|l| l.starts_with("lookup-start") && l.ends_with(" two"));
    assert!(
        a_end.is_some() && b_start.is_some() && a_end < b_start,
        "{lookups:?}"
    );
    // One transcript, in order, with both turns.
    let client = pg.client().await;
    let rows = client
        .query(
            "SELECT body FROM plughost_messages WHERE key = $1 AND NOT pending ORDER BY seq",
            &[&"agent:main:fakechat:dm:hank"],
        )
        .await
        .unwrap();
    let users: Vec<String> = rows
        .iter()
        .map(|r| serde_json::from_str::<serde_json::Value>(r.get::<_, &str>(0)).unwrap())
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(users, ["slow one", "two"]);
}

/// Under serve's default, a third-party platform plugin runs isolated:
/// its adapter runs in the plugin's worker, driven by the gateway through
/// the worker protocol (issue 49 item 5). A message gets its tool
/// progress and its reply through it; the worker killed, the gateway
/// reconnects the platform through a new worker and the chat goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_platform_plugins_adapter_runs_in_its_worker() {
    let service = ChatService::start().await;
    let (home, hermes) = homes(service.port);
    let shared = tempfile::tempdir().unwrap();
    let log = shared.path().join("events.log");
    let server = crate::gateway_common::serve_with(
        home.path(),
        hermes.path(),
        &script(shared.path()),
        &log,
        None,
        &[],
    );
    let hellos = |seen: &[Seen]| -> Vec<u64> {
        seen.iter()
            .filter_map(|x| match x {
                Seen::Hello { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect()
    };
    let seen = service
        .wait_for(WAIT, "the adapter to connect", |s| !hellos(s).is_empty())
        .await;
    let worker = hellos(&seen)[0];
    // The adapter is not in serve's process: it is in the plugin's worker.
    assert_ne!(worker, u64::from(server.child.id()));
    // Connected once the worker's connect() returned (after its hello).
    wait_connected(&server.url).await;
    service.deliver(None, "ivy", "ivy", "plum", "m1");
    let seen = service
        .wait_for(WAIT, "ivy's reply", |seen| {
            sent_to(seen, "ivy").iter().any(|t| t.starts_with("re: "))
        })
        .await;
    let texts = sent_to(&seen, "ivy");
    assert_eq!(texts[0], "🔧 lookup: {\"q\":\"plum\"}", "{texts:?}");
    assert!(
        texts[1].starts_with("re: plum ") && texts[1].contains("PLUM"),
        "{texts:?}"
    );
    // The worker's policy hook still sees the chat's messages.
    assert!(
        log_lines(&log).contains(&"dispatch fakechat ivy ivy plum".to_string()),
        "{:?}",
        log_lines(&log)
    );
    // The worker dies: the gateway connects the platform again, through a
    // new worker, and the chat is answered there.
    let killed = Command::new("kill")
        .args(["-9", &worker.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let seen = service
        .wait_for(WAIT, "a new worker's adapter to connect", |s| {
            hellos(s).iter().any(|p| *p != worker)
        })
        .await;
    let again = *hellos(&seen).iter().find(|p| **p != worker).unwrap();
    assert_ne!(again, u64::from(server.child.id()));
    service.deliver(None, "ivy", "ivy", "pear", "m2");
    service
        .wait_for(WAIT, "ivy's second reply", |seen| {
            sent_to(seen, "ivy").iter().any(|t| t == "re: pear")
        })
        .await;
}
