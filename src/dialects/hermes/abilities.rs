//! Which abilities of [`crate::dialects::abilities`] Hermes has, and how:
//! install detection (its imports, its manifest's kind), `requires_plugins`
//! order, its providers and what this host does not use in `plugins
//! doctor`, its plugins' CLI commands and its renderer. (`pre_tool_call`
//! failing closed, in-process or in a worker, is its row's:
//! [`super::lanes::EVENTS`].)

use std::path::Path;

use super::{cli, discover, manifest, members, order, providers, render, sniff, Hermes};
use super::{constants_origin, not_used, INSTALLED};
use crate::core::extensions::Extensions;
use crate::dialects::abilities::{
    Doctor, LoadOrder, Providers, Renderers, Sniff, TerminalCommands, TerminalError,
};
use crate::plugins::discovery::Candidate;

impl Sniff for Hermes {
    fn sniff(&self, dir: &Path) -> Option<String> {
        sniff::evidence(dir)
    }

    /// A plugin in plughost's own directories read as Hermes's: a
    /// `kind: platform` (a messaging-gateway adapter) is listed, not
    /// loaded, as in a Hermes home (none now: a platform plugin loads, its
    /// adapter runs under `serve`'s gateway). (Model and
    /// memory providers are left to load: issue 22 gives them a use; a
    /// memory provider's explicit `kind: exclusive` too,
    /// [`super::memory::admit_exclusive`].)
    fn admit_sniffed(&self, c: &mut Candidate) {
        super::memory::admit_exclusive(c);
        if c.missing || !c.enabled || c.skip_reason.is_some() {
            return;
        }
        let Some(path) = manifest::find(&c.dir) else {
            return;
        };
        if let Ok(m) = manifest::load(&path, &c.dir) {
            if let Some(why) = (m.kind == manifest::HermesKind::Platform)
                .then(|| discover::unsupported_kind(m.kind))
                .flatten()
            {
                c.skip_reason = Some(crate::plugins::format::Verdict::Unsupported(why));
            }
        }
    }
}

impl LoadOrder for Hermes {
    /// `requires_plugins` first, as Hermes orders them ([`order`]).
    fn order(
        &self,
        candidates: Vec<Candidate>,
        _isolated: &dyn Fn(&str) -> bool,
    ) -> Vec<Candidate> {
        order::load_order(candidates)
    }

    fn dependencies(&self, _key: &str, dir: &Path) -> Vec<String> {
        order::requires(dir)
    }
}

impl Doctor for Hermes {
    fn origin(&self) -> Option<String> {
        crate::runtime::Runtime::get()?;
        crate::runtime::try_attach(|py| {
            INSTALLED.get(py)?;
            constants_origin(py).ok()
        })
        .ok()
        .flatten()
    }
}

impl Providers for Hermes {
    // mp5: each provider plugin's provider, active or why not.
    fn providers(&self, state: &Extensions, key: &str) -> Vec<String> {
        let mut lines = providers::doctor_lines(state, key);
        lines.extend(members::doctor_lines(state, key));
        lines.extend(super::platform::doctor_lines(state, key));
        lines.extend(super::model_providers::doctor_lines(state, key));
        lines
    }

    fn not_used(&self, state: &Extensions, key: &str) -> Vec<String> {
        not_used(state, key)
    }
}

impl TerminalCommands for Hermes {
    fn commands(&self, state: &Extensions) -> Vec<(String, String, String)> {
        cli::list(state)
    }

    fn run(&self, state: &Extensions, name: &str, args: &[String]) -> Result<u8, TerminalError> {
        cli::run(state, name, args).map_err(|e| match e {
            cli::CliError::Unknown { .. } => TerminalError::Unknown(e.to_string()),
            _ => TerminalError::Failed(e.to_string()),
        })
    }
}

impl Renderers for Hermes {
    fn renderer(&self) -> Option<std::sync::Arc<dyn crate::core::outcome::Renderer>> {
        Some(std::sync::Arc::new(render::HermesRenderer))
    }
}

impl crate::dialects::abilities::Isolated for Hermes {
    /// The `hermes` stand-in command, written here: a confined worker
    /// reads it and puts it on its plugin's `PATH`, but may not write it.
    fn worker_reads(&self, home: &std::path::Path) -> Vec<std::path::PathBuf> {
        let path = std::env::var("PATH").unwrap_or_default();
        match super::shim::install(home, &path) {
            Ok(dir) => dir.into_iter().collect(),
            Err(e) => {
                tracing::warn!("processes Hermes plugins start will find no `hermes` command: {e}");
                Vec::new()
            }
        }
    }
}
