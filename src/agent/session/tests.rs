use serde_json::json;

use super::*;

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn converse(session: &mut Session, turns: usize) {
    for i in 0..turns {
        session
            .append(json!({"role": "user", "content": format!("question {i}")}))
            .unwrap();
        session
            .append(json!({"role": "assistant", "content": format!("answer {i}")}))
            .unwrap();
    }
}

#[test]
fn compaction_leaves_another_process_temporary_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path());
    let path = store.path_of("chat");
    let session = store.get("chat");
    let mut session = session.try_lock().unwrap();
    converse(&mut session, 3);
    // Where a compaction with a fixed temporary name would write: another
    // process compacting the same session may be writing it right now.
    let theirs = path.with_extension("jsonl.tmp");
    std::fs::write(&theirs, "another process, mid-write\n").unwrap();

    assert_eq!(session.compact(2).unwrap(), 4);

    assert_eq!(
        std::fs::read_to_string(&theirs).unwrap(),
        "another process, mid-write\n"
    );
    assert_eq!(
        entries(dir.path()),
        ["chat.jsonl", "chat.jsonl.tmp"],
        "no temporary file of ours is left behind"
    );
    let on_disk = load_transcript(&path);
    assert_eq!(on_disk, session.messages);
    assert_eq!(on_disk[0]["content"], "question 2");
}

#[test]
fn compaction_keeps_the_transcript_mode() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path());
    let path = store.path_of("private");
    let session = store.get("private");
    let mut session = session.try_lock().unwrap();
    converse(&mut session, 3);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    session.compact(2).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640);
}

#[test]
fn two_hosts_compacting_one_session_at_once_both_succeed() {
    let dir = tempfile::tempdir().unwrap();
    // One store per host, as two processes sharing a home would have.
    let hosts = 2;
    let start = std::sync::Barrier::new(hosts);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..hosts)
            .map(|_| {
                scope.spawn(|| {
                    let store = SessionStore::new(dir.path());
                    let session = store.get("shared");
                    let mut session = session.try_lock().unwrap();
                    start.wait();
                    for _ in 0..50 {
                        converse(&mut session, 2);
                        session.compact(2)?;
                    }
                    Ok::<(), std::io::Error>(())
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap().expect("every compaction succeeds");
        }
    });
    assert_eq!(entries(dir.path()), ["shared.jsonl"]);
    let text = std::fs::read_to_string(dir.path().join("shared.jsonl")).unwrap();
    for line in text.lines() {
        serde_json::from_str::<Value>(line).expect("only whole lines");
    }
}

/// A well-formed conversation of `turns` (tool calls answered in order).
fn conversation(turns: &[(u8, bool)]) -> Vec<Value> {
    let mut out = Vec::new();
    for (t, &(calls, text)) in turns.iter().enumerate() {
        out.push(json!({"role": "user", "content": format!("q{t}")}));
        if calls > 0 {
            let ids: Vec<String> = (0..calls).map(|c| format!("call_{t}_{c}")).collect();
            out.push(json!({"role": "assistant", "content": "", "tool_calls": ids.iter().map(|id| json!({"id": id, "type": "function", "function": {"name": "exec", "arguments": "{}"}})).collect::<Vec<_>>()}));
            for id in &ids {
                out.push(json!({"role": "tool", "tool_call_id": id, "name": "exec", "content": format!("ran {{{id}}}\n")}));
            }
        }
        if text {
            out.push(json!({"role": "assistant", "content": format!("a{t} ✓")}));
        }
    }
    out
}

fn answered_in_place(messages: &[Value]) -> bool {
    let mut open: Vec<&str> = Vec::new();
    for m in messages {
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap();
            let Some(at) = open.iter().position(|o| *o == id) else {
                return false;
            };
            open.remove(at);
        } else {
            if !open.is_empty() {
                return false;
            }
            open = m["tool_calls"]
                .as_array()
                .map(|a| a.iter().filter_map(|c| c["id"].as_str()).collect())
                .unwrap_or_default();
        }
    }
    open.is_empty()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// A crash can cut the transcript at any byte. Whatever is left, a
    /// resync keeps every whole message, sets the torn rest aside byte
    /// for byte, and leaves a transcript whose calls are all answered.
    #[test]
    fn a_transcript_cut_anywhere_resyncs_to_a_valid_one_losing_nothing(
        turns in proptest::collection::vec((0u8..3, proptest::bool::ANY), 1..5),
        cut_at in 0.0f64..1.0,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let path = store.path_of("cut");
        let full: String = conversation(&turns).iter().map(|m| format!("{m}\n")).collect();
        let mut cut = ((full.len() as f64) * cut_at) as usize;
        while !full.is_char_boundary(cut) {
            cut -= 1;
        }
        let kept = &full[..cut];
        std::fs::write(&path, kept).unwrap();
        let whole: Vec<Value> = kept.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let torn = kept.rsplit_once('\n').map_or(kept, |(_, t)| t);
        let torn_is_whole = serde_json::from_str::<Value>(torn).is_ok_and(|v| v.is_object());

        let session = store.get("cut");
        let mut session = session.try_lock().unwrap();
        let repairs = session.resync().unwrap();

        proptest::prop_assert!(answered_in_place(&session.messages));
        let on_disk = load_transcript(&path);
        proptest::prop_assert_eq!(&on_disk, &session.messages);
        // Every whole message kept, in order; only answers added.
        let originals: Vec<&Value> = on_disk.iter().filter(|m| m.get("ts").is_none()).collect();
        proptest::prop_assert_eq!(originals, whole.iter().collect::<Vec<_>>());
        let text = std::fs::read_to_string(&path).unwrap();
        proptest::prop_assert!(text.is_empty() || text.ends_with('\n'));
        if torn.is_empty() || torn_is_whole {
            proptest::prop_assert_eq!(repairs.side_file, None);
        } else {
            let side = repairs.side_file.expect("the torn line is set aside");
            proptest::prop_assert_eq!(std::fs::read_to_string(side).unwrap(), format!("{torn}\n"));
        }
        // A second resync finds nothing to do.
        drop(session);
        let again = SessionStore::new(dir.path());
        let again = again.get("cut");
        let mut again = again.try_lock().unwrap();
        proptest::prop_assert_eq!(again.resync().unwrap(), Repairs::default());
    }

    /// A repair goes over what follows the part the last one left intact
    /// (a session's earlier turns are not scanned again each turn): what
    /// it gives is what a repair of the whole transcript gives, whatever
    /// follows (results of earlier calls, stray or repeated ids, calls
    /// left open).
    #[test]
    fn repairing_what_follows_the_intact_part_is_repairing_the_whole(
        turns in proptest::collection::vec((0u8..3, proptest::bool::ANY), 0..4),
        more in proptest::collection::vec((0u8..4, 0u8..4), 0..8),
    ) {
        let store = SessionStore::new(std::path::Path::new("/nonexistent"));
        store.open_in_memory("whole", conversation(&turns));
        let session = store.get("whole");
        let mut session = session.try_lock().unwrap();
        session.resync().unwrap();
        // Call ids shared with the earlier turns (call_0_0, call_1_1, …).
        let id = |n: u8| format!("call_{}_{}", n % 2, n / 2);
        for (kind, n) in more {
            session.messages.push(match kind {
                0 => json!({"role": "user", "content": format!("u{n}")}),
                1 => json!({"role": "assistant", "content": "", "tool_calls": [{"id": id(n), "type": "function", "function": {"name": "exec", "arguments": "{}"}}]}),
                2 => json!({"role": "tool", "tool_call_id": id(n), "name": "exec", "content": format!("r{n}")}),
                _ => json!({"role": "assistant", "content": format!("a{n}")}),
            });
        }
        let whole = repair_messages(session.messages.clone(), &interrupted_result);
        let repairs = session.resync().unwrap();
        // The answers written are stamped with the time they were made.
        let unstamped = |messages: &[Value]| -> Vec<Value> {
            messages.iter().cloned().map(|mut m| {
                m.as_object_mut().unwrap().remove("ts");
                m
            }).collect()
        };
        proptest::prop_assert_eq!(unstamped(&session.messages), unstamped(&whole.messages));
        proptest::prop_assert_eq!(repairs.answered, whole.answered);
        proptest::prop_assert_eq!(repairs.set_aside, whole.aside.len());
        proptest::prop_assert!(answered_in_place(&session.messages));
    }

    /// An intact transcript is never rewritten.
    #[test]
    fn an_intact_transcript_is_left_alone(
        turns in proptest::collection::vec((0u8..3, proptest::bool::ANY), 0..5),
    ) {
        let messages = conversation(&turns);
        let repaired = repair_messages(messages.clone(), &interrupted_result);
        proptest::prop_assert!(!repaired.changed);
        proptest::prop_assert_eq!(repaired.messages, messages);
    }
}

#[test]
fn repeated_call_ids_across_turns_are_not_confused() {
    // The scripted provider and some servers reuse ids from turn to turn.
    let call = json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "exec", "arguments": "{}"}}]});
    let result = json!({"role": "tool", "tool_call_id": "call_0", "name": "exec", "content": "ok"});
    let messages = vec![
        json!({"role": "user", "content": "1"}),
        call.clone(),
        json!({"role": "user", "content": "2"}),
        call.clone(),
        result.clone(),
    ];
    let repaired = repair_messages(messages, &interrupted_result);
    assert_eq!(repaired.answered, 1);
    assert_eq!(repaired.messages[2]["content"], interrupted_result("exec"));
    assert_eq!(
        repaired.messages[5], result,
        "the second call keeps its own result"
    );
    assert!(answered_in_place(&repaired.messages));
}

#[tokio::test]
async fn a_held_session_refuses_another_holder_then_frees_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (SessionStore::new(dir.path()), SessionStore::new(dir.path()));
    let (a, b) = (one.get("k"), two.get("k"));
    let (a, b) = (a.lock().await, b.lock().await);
    let held = a.lock_turn(Duration::from_millis(10)).await.unwrap();
    let started = Instant::now();
    let err = b.lock_turn(Duration::from_millis(200)).await.err().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(
        matches!(err, SessionError::Busy { holder: Some(pid), .. } if pid == std::process::id())
    );
    drop(held);
    let _second = b.lock_turn(Duration::from_millis(10)).await.unwrap();
}

#[tokio::test]
async fn a_fifo_at_the_transcript_path_is_refused_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path());
    let path = store.path_of("fifo");
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let session = store.get("fifo");
    let mut session = session.lock().await;
    let _held = session.lock_turn(Duration::from_secs(1)).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), async { session.resync() })
        .await
        .expect("no hang")
        .unwrap_err();
    assert!(matches!(err, SessionError::Io { .. }));
    assert!(
        err.to_string().starts_with(&format!(
            "cannot read the transcript for session 'fifo' ({}): not a regular file",
            path.display()
        )),
        "{err}"
    );
}

#[test]
fn two_names_never_share_a_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path().to_path_buf());
    // What the name-plus-32-bit-hash mapping made of `a/b`: a plain name
    // another client could choose, and then continue `a/b`'s conversation.
    let old_of_a_b = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        "a/b".hash(&mut h);
        format!("a_b-{:08x}", h.finish() as u32)
    };
    assert_ne!(store.path_of("a/b"), store.path_of(&old_of_a_b));
    assert_eq!(file_stem("a/b"), "a%2Fb");
    assert_eq!(file_stem("chat-1_x.y"), "chat-1_x.y");
    assert_eq!(file_stem(".hidden"), "%2Ehidden");
    assert_eq!(file_stem(""), "%");
    assert_eq!(file_stem("a%2Fb"), "a%252Fb");
    let names = [
        "a/b", "a_b", "a%2Fb", "a%b", ".a", "%2Ea", "", "%", "é", "\u{e9}x",
    ];
    let stems: std::collections::HashSet<String> = names.iter().map(|n| file_stem(n)).collect();
    assert_eq!(stems.len(), names.len(), "{stems:?}");
    // A turn's message in one is not in the other.
    let a = store.get("a/b");
    a.blocking_lock()
        .append(json!({"role": "user", "content": "secret"}))
        .unwrap();
    let b = store.get(&old_of_a_b);
    assert!(b.blocking_lock().messages.is_empty());
}

#[test]
fn a_name_too_long_to_store_is_refused_with_the_limit() {
    assert!(check_name(&"a".repeat(MAX_STEM)).is_ok());
    let err = check_name(&"/".repeat(100)).unwrap_err();
    assert!(
        err.contains("300 bytes") && err.contains("at most 220"),
        "{err}"
    );
}
