//! The worker process: loads one plugin through its dialect, exactly as
//! plughost does in-process, and serves requests on the protocol stream.
//!
//! The stream is the worker's original stdin/stdout (a socket plughost
//! made). Before anything else runs they are moved to private descriptors,
//! fd 0 becomes `/dev/null` and fd 1 becomes stderr, so a plugin's
//! `print()` or `input()` can never touch the protocol.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use super::protocol::{
    read_frame, write_frame, ActionWire, Contribution, Envelope, OwnedPayload, Reply, Request,
};
use crate::hooks::{HookEntry, HookEvent, HookPayload, HookReturn};
use crate::outcome::PluginError;
use crate::registry::{Command, CommandReturn, Registration, Tool, ToolReturn};

/// The plugin's contributions, as the requests name them.
#[derive(Default)]
struct Served {
    tools: HashMap<String, Tool>,
    hooks: Vec<HookEntry>,
    commands: HashMap<String, Command>,
}

/// Run as a worker: serve until plughost closes the stream, then exit.
/// Never returns.
pub fn main() -> ! {
    let (input, output) = match take_protocol_fds() {
        Ok(fds) => fds,
        Err(e) => {
            eprintln!("plughost worker: cannot take the protocol stream: {e}");
            std::process::exit(70);
        }
    };
    serve(File::from(input), File::from(output))
}

/// Move fds 0 and 1 out of a plugin's reach (see the module docs).
fn take_protocol_fds() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let dup = |fd: i32| -> std::io::Result<OwnedFd> {
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a descriptor number only
        // creates a new descriptor; no memory is passed.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if new < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `new` was just returned by fcntl, is open, and is owned
        // by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(new) })
    };
    let input = dup(0)?;
    let output = dup(1)?;
    let null = File::open("/dev/null")?;
    let redirect = |from: i32, to: i32| -> std::io::Result<()> {
        // SAFETY: dup2 between two open descriptor numbers; no memory is
        // passed, and fds 0/1 are not owned by any Rust object here.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    use std::os::fd::AsRawFd;
    redirect(null.as_raw_fd(), 0)?;
    redirect(2, 1)?;
    Ok((input, output))
}

/// End the process at once: the stream is gone (plughost exited or closed
/// it), so nothing can be answered any more. `_exit` also ends a process
/// whose plugin spins holding the GIL.
fn end(code: i32) -> ! {
    // SAFETY: _exit only ends the process; no Rust state is used after.
    unsafe { libc::_exit(code) }
}

fn serve(mut input: File, output: File) -> ! {
    let first: Option<Envelope<Request>> = read_frame(&mut input).unwrap_or(None);
    let Some(Envelope {
        id,
        body:
            Request::Load {
                key,
                dir,
                home,
                dialect,
                python_log_level,
            },
    }) = first
    else {
        eprintln!("plughost worker: the first request must be Load");
        end(70)
    };
    let (tx, rx) = std::sync::mpsc::channel::<Envelope<Reply>>();
    std::thread::spawn(move || {
        let mut output = output;
        for reply in rx {
            if write_frame(&mut output, &reply).is_err() {
                end(0);
            }
        }
    });
    let (served, reply) = load(&key, &dir, &home, &dialect, python_log_level);
    let _ = tx.send(Envelope { id, body: reply });
    let Some(served) = served else {
        // Let the writer send the failure, then end: nothing to serve.
        drop(tx);
        std::thread::sleep(std::time::Duration::from_millis(50));
        end(0)
    };
    let served = Arc::new(served);
    let rt = match crate::runtime::Runtime::get() {
        Some(rt) => rt.tokio(),
        None => end(70),
    };
    loop {
        match read_frame::<_, Envelope<Request>>(&mut input) {
            Ok(Some(Envelope { id, body })) => {
                let served = served.clone();
                let tx = tx.clone();
                rt.spawn(async move {
                    let body = answer(&served, body).await;
                    let _ = tx.send(Envelope { id, body });
                });
            }
            // plughost closed the stream (or it broke): nothing more to do.
            Ok(None) | Err(_) => end(0),
        }
    }
}

/// Load the plugin; what it contributes, as served and as announced.
fn load(
    key: &str,
    dir: &std::path::Path,
    home: &std::path::Path,
    dialect: &str,
    python_log_level: u8,
) -> (Option<Served>, Reply) {
    let fail = |error: PluginError| (None, Reply::LoadFailed { error });
    if let Err(e) = crate::runtime::Runtime::start(python_log_level) {
        return fail(PluginError::native(e.to_string()));
    }
    let Some(dialect) = crate::dialects::by_name(dialect) else {
        return fail(PluginError::native(format!(
            "no dialect '{dialect}' in this build"
        )));
    };
    let loaded = match dialect.load(key, dir, home) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    // The package stays imported for the worker's whole life.
    std::mem::forget(loaded.package);
    let mut served = Served::default();
    let mut contributions = Vec::new();
    for r in loaded.registrations {
        match r {
            Registration::Tool(t) => {
                contributions.push(Contribution::Tool {
                    name: t.spec.name.clone(),
                    description: t.spec.description.clone(),
                    parameters: t.spec.parameters.clone(),
                    terminal: t.terminal,
                    toolset: t.spec.toolset.clone(),
                    requires_env: t.spec.requires_env.clone(),
                    shadows_only_own_toolset: t.shadows_only_own_toolset,
                });
                served.tools.insert(t.spec.name.clone(), t);
            }
            Registration::Hook { event, name, entry } => {
                contributions.push(Contribution::Hook {
                    event: event.map(|e| e.name().to_string()),
                    name,
                    label: entry.label.clone(),
                    priority: entry.priority,
                    index: served.hooks.len(),
                });
                served.hooks.push(entry);
            }
            Registration::Command(c) => {
                contributions.push(Contribution::Command {
                    name: c.name.clone(),
                    description: c.description.clone(),
                    args_hint: c.args_hint.clone(),
                });
                served.commands.insert(c.name.clone(), c);
            }
            Registration::Skill(s) => contributions.push(Contribution::Skill {
                name: s.name,
                description: s.description,
                path: s.path,
            }),
        }
    }
    (Some(served), Reply::Loaded { contributions })
}

fn refused(problem: String) -> Reply {
    Reply::Refused { problem }
}

/// Serve one request. Synchronous plugin code runs on a blocking thread,
/// so a slow call does not hold up the others.
async fn answer(served: &Served, request: Request) -> Reply {
    match request {
        Request::Load { .. } => refused("the plugin is already loaded".into()),
        Request::Check { tool } => {
            let Some(handler) = served.tools.get(&tool).map(|t| t.handler.clone()) else {
                return refused(format!("no tool '{tool}' in this worker"));
            };
            let checked = tokio::task::spawn_blocking(move || handler.check()).await;
            match checked {
                Ok(result) => Reply::Checked { result },
                Err(e) => refused(format!("the check did not finish: {e}")),
            }
        }
        Request::Tool { tool, call } => {
            let Some(handler) = served.tools.get(&tool).map(|t| t.handler.clone()) else {
                return refused(format!("no tool '{tool}' in this worker"));
            };
            let started = tokio::task::spawn_blocking(move || {
                let mut ctx = call.into_context(None);
                let returned = handler.call(&mut ctx);
                (returned, ctx)
            })
            .await;
            let (returned, ctx) = match started {
                Ok(r) => r,
                Err(e) => return refused(format!("the tool did not finish: {e}")),
            };
            let result = match returned {
                ToolReturn::Ready(r) => r,
                ToolReturn::Pending(fut) => fut.await,
            };
            drop(ctx);
            Reply::Tool { result }
        }
        Request::Hook {
            index,
            event,
            payload,
        } => {
            let Some(entry) = served.hooks.get(index) else {
                return refused(format!("no hook number {index} in this worker"));
            };
            let Some(event) = HookEvent::from_name(&event) else {
                return refused(format!("no event '{event}'"));
            };
            let callback = entry.callback.clone();
            let started = tokio::task::spawn_blocking(move || {
                let mut owned = OwnedPayload::from_wire(payload, event);
                let returned = callback.call(event, owned.as_payload());
                (returned, owned)
            })
            .await;
            let (returned, mut owned) = match started {
                Ok(r) => r,
                Err(e) => return refused(format!("the hook did not finish: {e}")),
            };
            let answer = match returned {
                HookReturn::Ready(r) => r,
                HookReturn::Pending(fut) => fut.await,
            };
            let params = match owned.as_payload() {
                HookPayload::Tool(ctx) => ctx.dialect.edited_params(),
                _ => None,
            };
            Reply::Hook {
                answer: answer.map(ActionWire::from).map_err(Into::into),
                params,
            }
        }
        Request::Command { name, args } => {
            let Some(handler) = served.commands.get(&name).map(|c| c.handler.clone()) else {
                return refused(format!("no command '/{name}' in this worker"));
            };
            let started = tokio::task::spawn_blocking(move || handler.call(&args)).await;
            let result = match started {
                Ok(CommandReturn::Ready(r)) => r,
                Ok(CommandReturn::Pending(fut)) => fut.await,
                Err(e) => return refused(format!("the command did not finish: {e}")),
            };
            Reply::Command { result }
        }
    }
}
