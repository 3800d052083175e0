//! The event reference of each dialect's plugin author's guide
//! (`docs/<dialect>-events.md`), rendered from [`HOOK_SPECS`] — the table
//! the dispatcher fires by — and from what the dialect really shows its
//! callbacks, captured by firing every event at a recording plugin
//! (`tests/process_wide/event_reference.rs`). So the reference cannot drift from the
//! code: the test fails when `docs/` differs from a fresh rendering.
//!
//! A dialect's part is one file in its own folder,
//! `src/dialects/<name>/reference.rs` (a [`DialectDoc`]: how its answers
//! are spelled, what each field means, its recording plugin), plus one
//! entry in [`DIALECTS`](crate::dialects::DIALECTS); this generator knows no dialect's rules.

use std::fmt::Write;

use crate::core::hooks::{ActionKind, FailMode, HookEvent, Policy, HOOK_SPECS};
pub use crate::core::reference::{DialectDoc, OwnEvents};

/// Every dialect with a guide, in the dialect table's order.
pub fn dialects() -> Vec<&'static DialectDoc> {
    crate::dialects::DIALECTS
        .iter()
        .filter_map(|d| d.reference())
        .collect()
}

/// What the recording plugins saw for one dialect.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Captured {
    /// The registration context's methods: (name, signature, first paragraph of its doc).
    pub methods: Vec<(String, String, String)>,
    /// Its other attributes: (name, Python type).
    #[serde(default)]
    pub attributes: Vec<(String, String)>,
    /// Per event name, the fields its callback saw: (name, Python type).
    pub events: std::collections::BTreeMap<String, Vec<(String, String)>>,
    /// Events where a raising callback turned into an answer (fail closed).
    #[serde(default)]
    pub fails_closed: Vec<String>,
    /// Event names the dialect's Python side knows (Felix's hook kinds).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Objects beside the payload (Codumentor's `ctx`, `agent`): their fields.
    #[serde(default)]
    pub objects: std::collections::BTreeMap<String, Vec<(String, String)>>,
}

/// When the agent loop fires `event` (the same in every dialect).
pub fn fires(event: HookEvent) -> &'static str {
    match event {
        HookEvent::ToolGuard => "Before every tool call, after its arguments passed the schema check (also for `tools call` and `Host.call_tool`).",
        HookEvent::ToolDone => "After a tool's handler returned or raised (not for calls that were blocked, refused or not found).",
        HookEvent::ResultRewrite => "After `post_tool_call`, before the result goes back to the model.",
        HookEvent::ExecOutputRewrite => "When the built-in `exec` tool finished, before the post hooks.",
        HookEvent::PromptContext => "Before each model call of a turn.",
        HookEvent::ExchangeDone => "After each model call of a turn, with the assistant's answer.",
        HookEvent::RequestSending => "Just before the provider request is sent.",
        HookEvent::ResponseArrived => "Just after the provider answered.",
        HookEvent::SessionOpened => "On a session's first message (a new transcript).",
        HookEvent::TurnClosed => "At the end of every turn (`run`, each chat message), also when it failed or was cancelled.",
        HookEvent::SessionClosing => "Once per session when the agent shuts down or evicts an idle session.",
        HookEvent::SessionCleared => "When `/new` or `/clear` starts the session over.",
        HookEvent::SubagentDone => "When a `delegate` sub-agent finished.",
        HookEvent::InboundGate => "When a message arrives, before slash commands and the model.",
        HookEvent::ReplyRewrite => "On a turn's final reply, before the user gets it (the transcript keeps the model's own words).",
        HookEvent::SubagentBegun => "When a `delegate` sub-agent starts, with its goal.",
        HookEvent::RequestFailed => "When a model call failed, with the error.",
        HookEvent::HostStart => "P0: when the host starts serving (`run`, `chat`, `tools call`, `commands run`; not when listing).",
        HookEvent::InputReceived => "P1: an inbound message, after `pre_gateway_dispatch`, before slash commands.",
        HookEvent::CompactBefore => "P2c: `/compact`, before the transcript is rewritten.",
        HookEvent::CompactFailed => "P2c: rewriting the transcript for `/compact` failed.",
        HookEvent::HistoryReady => "P4: once per turn, when the turn's history (system prompt first, then the transcript and the new user message) is assembled.",
        HookEvent::PromptFinal => "P6: this model call's message list only; edits are not carried.",
        HookEvent::ModelCallStart => "P7: immediately before the provider call; the model and its parameters may be changed.",
        HookEvent::ModelCallError => "P7e: the provider call failed; a callback may ask for it again.",
        HookEvent::ModelReplied => "P8: the provider answered; the reply the loop acts on may be replaced.",
        HookEvent::ToolExecuting => "P9x: immediately before the tool's handler runs (after its availability check).",
        HookEvent::ResponseBeforeSend => "P11: the final answer, before it is stored and returned.",
        HookEvent::ResponsePersisted => "P12: the final answer was stored.",
        HookEvent::TurnEnded => "P13: the turn ended (answer, short circuit, abort, error, interruption …).",
        HookEvent::Lane(id) => id.lane().fires,
    }
}

/// What an answer of `kind` does at `event`.
pub fn effect(event: HookEvent, kind: ActionKind) -> &'static str {
    match (event, kind) {
        (_, ActionKind::Block) => "the call is not run; the result is `[blocked: <message>]` and the post hooks do not fire",
        (_, ActionKind::Skip) => "the message is dropped: no command, no model call, no reply",
        (_, ActionKind::Rewrite) => "the message's text is replaced before commands and the model see it",
        (HookEvent::ExecOutputRewrite, ActionKind::Replace) => "replaces `exec`'s output before the post hooks see it",
        (_, ActionKind::Replace) => "replaces the result the model (or the caller) gets",
        (_, ActionKind::Decide) => "a typed decision of the dialect's own answer conventions (its guide lists them)",
        (_, ActionKind::Inject) => "joined with the other answers and prepended to the latest user message as `<plugin_context>…</plugin_context>` (the stored transcript keeps the original)",
    }
}

fn policy_text(policy: Policy) -> &'static str {
    match policy {
        Policy::Observe => "observe: answers are not used",
        Policy::FirstWins => "first wins: every callback runs; the first accepted answer counts",
        Policy::Chain => "chain: each replacement is what the next callback sees",
        Policy::Collect => "collect: every accepted answer counts, in order",
        Policy::Merge => {
            "merge: every callback sees the same input; the answers are merged, a later key winning"
        }
        Policy::StopAtFirst => {
            "stop at first: the first accepted answer counts and the callbacks after it do not run"
        }
        Policy::Veto => {
            "veto: every callback runs; the first refusal counts, and an abort of the turn outranks it"
        }
        Policy::FirstOfEach => {
            "first of each kind: every callback runs; the first answer of each kind counts, and every append"
        }
    }
}

/// The markdown of `docs/<dialect>-events.md`; an error names a captured
/// field or event the dialect's notes do not cover.
pub fn render(doc: &DialectDoc, captured: &Captured) -> Result<String, String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!-- GENERATED by `PLUGHOST_UPDATE_DOCS=1 cargo test --test event_reference` from\n     plughost::core::hooks::HOOK_SPECS and src/dialects/{}/reference.rs; do not edit. -->\n",
        doc.name
    );
    let _ = writeln!(out, "# {} plugins: reference\n", doc.title);
    let _ = writeln!(
        out,
        "What a {} plugin's `{}` can call, and every event it can hook: when it fires, what the callback sees, which answers count and what they do. Generated from the table the dispatcher fires by, and from what a recording plugin saw, so it matches this build. The guide is [{}.md]({}.md).\n",
        doc.title,
        doc.own_events.map_or("register(ctx)", |o| o.register),
        doc.name,
        doc.name
    );
    let _ = writeln!(out, "## The registration context\n");
    let _ = writeln!(out, "| method | what it does |\n|---|---|");
    for (name, signature, _) in &captured.methods {
        let text = doc
            .methods
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                format!(
                    "{}: method `{name}` of the context is not described in src/dialects/{}/reference.rs",
                    doc.name, doc.name
                )
            })?;
        let _ = writeln!(out, "| `{name}{}` | {} |", cell(signature), cell(text));
    }
    if !captured.attributes.is_empty() {
        let _ = writeln!(out, "\n| attribute | type |\n|---|---|");
        for (name, ty) in &captured.attributes {
            let _ = writeln!(out, "| `{name}` | `{ty}` |");
        }
    }
    let _ = writeln!(out, "\n## Hook callbacks\n\n{}\n", doc.calling);
    if let Some(own) = doc.own_events {
        render_own(doc, own, captured, &mut out)?;
        return Ok(out.trim_end().to_string() + "\n");
    }
    let _ = writeln!(out, "## Events\n");
    // The loop points are for dialects that map their own names onto them;
    // a dialect whose plugins subscribe to the seed events lists those, in
    // the order of the lanes they fire on, by the names its rows give them.
    let rows = crate::dialects::by_name(doc.name).map_or(&[][..], |d| d.events());
    for spec in HOOK_SPECS
        .iter()
        .filter(|s| !HookEvent::LOOP_POINTS.contains(&s.event))
    {
        let event = spec.event;
        let Some(name) = rows.iter().find(|r| r.lane == event).map(|r| r.name) else {
            return Err(format!("{}: no row of the dialect names {event}", doc.name));
        };
        // Every dialect has the seed's fourteen events; the events beyond
        // them (Hermes's) are listed where the dialect's plugins can hook them.
        let seed = HookEvent::ALL[..14].contains(&event);
        let fields = match captured.events.get(name) {
            Some(fields) => fields,
            None if seed => {
                return Err(format!(
                    "{}: the recording plugin never saw {name}",
                    doc.name
                ))
            }
            None => continue,
        };
        seed_event(doc, captured, (name, spec), fields, &mut out)?;
    }
    Ok(out.trim_end().to_string() + "\n")
}

/// One seed event's section: when it fires, its fields, what answers do.
fn seed_event(
    doc: &DialectDoc,
    captured: &Captured,
    (name, spec): (&str, &crate::core::hooks::HookSpec),
    fields: &[(String, String)],
    out: &mut String,
) -> Result<(), String> {
    let event = spec.event;
    let _ = writeln!(out, "### `{name}`\n\n{}\n", fires(event));
    let _ = writeln!(out, "| field | type | meaning |\n|---|---|---|");
    for (field, ty) in fields {
        let meaning = doc
            .fields
            .iter()
            .find(|(n, _)| n == field)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                format!(
                    "{}: field `{field}` of {name} has no meaning in src/dialects/{}/reference.rs",
                    doc.name, doc.name
                )
            })?;
        let ty = if ty == "NoneType" { "None" } else { ty };
        let _ = writeln!(out, "| `{field}` | `{ty}` | {meaning} |");
    }
    let _ = writeln!(out, "\n- Answers: {}.", policy_text(spec.policy));
    for kind in spec.accepts {
        let _ = writeln!(
            out,
            "- {}: {}.",
            (doc.answer)(event, *kind),
            effect(event, *kind)
        );
    }
    if spec.accepts.is_empty() {
        let _ = writeln!(out, "- Return nothing (`None`); any other answer is ignored and counted (`plugins doctor`).");
    } else {
        let _ = writeln!(out, "- Anything else (`None` included) changes nothing; an answer of another shape is ignored and counted (`plugins doctor`).");
    }
    let closed =
        spec.on_error == FailMode::Closed || captured.fails_closed.iter().any(|e| e == name);
    let _ = writeln!(
        out,
        "- A callback that raises or runs past its budget: {}.",
        if closed {
            "**fails closed**, as if it had blocked (the call is not run)"
        } else {
            "logged with the plugin's name and counted; the event goes on"
        }
    );
    let note = (doc.note)(event);
    if !note.is_empty() {
        let _ = writeln!(out, "\n{note}");
    }
    let _ = writeln!(out);
    Ok(())
}

/// The meaning of a captured field, or an error naming it.
fn meaning(doc: &DialectDoc, name: &str, of: &str) -> Result<&'static str, String> {
    doc.fields
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, m)| *m)
        .ok_or_else(|| {
            format!(
                "{}: field `{name}` of {of} has no meaning in src/dialects/{}/reference.rs",
                doc.name, doc.name
            )
        })
}

fn fields_table(
    doc: &DialectDoc,
    fields: &[(String, String)],
    of: &str,
    out: &mut String,
) -> Result<(), String> {
    if fields.is_empty() {
        let _ = writeln!(out, "No fields: the payload is empty (`{{}}`).");
        return Ok(());
    }
    let _ = writeln!(out, "| field | type | meaning |\n|---|---|---|");
    for (name, ty) in fields {
        let ty = if ty == "NoneType" { "None" } else { ty };
        let _ = writeln!(
            out,
            "| `{name}` | `{ty}` | {} |",
            cell(meaning(doc, name, of)?)
        );
    }
    Ok(())
}

/// The events of a dialect with its own names: each with the loop points
/// it fires at (from the dialect's table), their policies (from
/// [`HOOK_SPECS`]), the payload the recorder saw and what answers do.
fn render_own(
    doc: &DialectDoc,
    own: &OwnEvents,
    captured: &Captured,
    out: &mut String,
) -> Result<(), String> {
    for (key, heading, text) in own.objects {
        let fields = captured
            .objects
            .get(*key)
            .ok_or_else(|| format!("{}: the recording plugin never saw `{key}`", doc.name))?;
        let _ = writeln!(out, "## {heading}\n\n{text}\n");
        fields_table(doc, fields, key, out)?;
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "## Events\n");
    let _ = writeln!(out, "Each event fires at one or more loop points of plughost's agent loop. At every loop point an edit of the context (replaced messages, reply, result, text) is applied at once, so the next callback sees it, whatever the point's policy; the policy decides among the other answers (a block, a short circuit, an abort).\n");
    let mut names: Vec<&str> = own.known.to_vec();
    for kind in &captured.kinds {
        if !names.contains(&kind.as_str()) {
            names.push(kind);
        }
    }
    for name in names {
        let answers = (own.answers)(name).ok_or_else(|| {
            format!(
                "{}: event `{name}` has no answers described in src/dialects/{}/reference.rs",
                doc.name, doc.name
            )
        })?;
        let _ = writeln!(out, "### `{name}`\n");
        let points = (own.points)(name);
        if points.is_empty() {
            let _ = writeln!(out, "Never fires in plughost. {answers}\n");
            continue;
        }
        for point in &points {
            let spec = point.spec();
            let _ = writeln!(
                out,
                "- Fires at loop point `{point}`: {} Policy there: {}; a callback that raises or runs past its budget {}.",
                fires(*point),
                policy_text(spec.policy),
                if spec.on_error == FailMode::Closed {
                    "**fails closed**"
                } else {
                    "is reported in `hook_errors` and skipped (fails open)"
                }
            );
        }
        let fields = captured
            .events
            .get(name)
            .ok_or_else(|| format!("{}: the recording plugin never saw {name}", doc.name))?;
        let _ = writeln!(out);
        fields_table(doc, fields, name, out)?;
        let _ = writeln!(out, "\nAnswers: {answers}\n");
    }
    Ok(())
}

/// Text safe inside a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}
