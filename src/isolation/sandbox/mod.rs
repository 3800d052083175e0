//! Kernel confinement of an isolated plugin's worker (issue 50; the
//! threat model is docs/security.md).
//!
//! A worker is confined when it runs a plugin whose
//! `plugins.entries.<key>.sandbox` is not `false` (in-process plugins,
//! `plugins.trusted` ones included, are never confined). Everything is set
//! up in the worker's own process between `fork` and `exec`
//! ([`spawn`]), so it holds before any plugin code runs and for every
//! thread and child the plugin starts:
//!
//! - files ([`files`]): a Landlock ruleset built in plughost before the
//!   fork (allocating, opening the paths) and only enforced in the child
//!   (`landlock_restrict_self`, one system call); what it allows is
//!   [`Policy`], from the defaults ([`policy`]) and the plugin's settings;
//! - Unix sockets ([`sockets`]): a seccomp filter refuses opening one,
//!   which Landlock (before ABI 9) would not stop from reaching a daemon;
//! - no new privileges (`PR_SET_NO_NEW_PRIVS`), no core dumps
//!   (`RLIMIT_CORE` 0), and a user namespace of its own so a worker of a
//!   root plughost holds no capability outside it;
//! - the network ([`spawn`]): for `"none"` a network namespace with only
//!   a loopback of its own (a connection to the host's loopback is
//!   refused, other hosts are unreachable); for a list of hosts the same
//!   namespace whose only way out is plughost's proxy ([`proxy`]);
//! - memory: `memory_mb` as `plugins.limits` (`RLIMIT_DATA`);
//! - the process tree ([`tree`]): a cgroup of its own, killed whole when
//!   the worker ends (`setsid` children included).
//!
//! What the kernel does not offer is named once at start
//! ([`support()`], logged by [`warn_once`]) and the rest still applies.

pub mod denials;
pub mod files;
pub mod into_cgroup;
pub mod policy;
pub mod proxy;
pub mod sockets;
pub mod spawn;
pub mod support;
pub mod tree;

pub use policy::{policy_for, preview, Policy};
pub use support::{support, warn_once, Support};

/// The rules of `policy`, one line, for the install summary and
/// `plugins doctor` (`sandbox: network none, memory 256 MiB, write …`).
pub fn describe(policy: &Policy) -> String {
    let net = match &policy.network {
        crate::plugins::config::NetworkRule::Any => "network any".to_string(),
        crate::plugins::config::NetworkRule::None => "network none".to_string(),
        crate::plugins::config::NetworkRule::Hosts(h) => format!("network only {}", h.join(", ")),
    };
    let mut parts = vec![net];
    if let Some(mb) = policy.memory_mb {
        parts.push(format!("memory {mb} MiB"));
    }
    let shown = |paths: &[std::path::PathBuf]| {
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    parts.push(if policy.unix_sockets {
        "unix sockets allowed".to_string()
    } else {
        "no unix sockets".to_string()
    });
    parts.push(format!("write {}", shown(&policy.write)));
    if !policy.extra_read.is_empty() {
        parts.push(format!("read also {}", shown(&policy.extra_read)));
    }
    let missing = support().missing();
    if !missing.is_empty() {
        parts.push(format!("not enforced here: {}", missing.join(", ")));
    }
    format!("sandbox: {}", parts.join("; "))
}

/// The line `plugins doctor` and the install summary show for a plugin
/// whose worker is confined by `policy`, or whose sandbox is off.
pub fn line(key: &str, policy: Option<&Policy>) -> String {
    match policy {
        Some(p) => describe(p),
        None => format!(
            "sandbox: off (plugins.entries.{key}.sandbox is false): the worker runs unconfined"
        ),
    }
}

/// The install summary's line for plugin `key` installed at `dir`.
pub fn install_line(
    home: &std::path::Path,
    key: &str,
    dir: &std::path::Path,
    dialect: &str,
) -> String {
    let load = crate::isolation::LoadSpec {
        key: key.to_string(),
        dir: dir.to_path_buf(),
        home: home.to_path_buf(),
        dialect: dialect.to_string(),
        limits: Default::default(),
        guard: false,
        host: Default::default(),
    };
    let rules = match preview(&load) {
        Ok(policy) => line(key, policy.as_ref()),
        Err(problem) => format!("sandbox: cannot be read ({problem})"),
    };
    format!("Runs isolated in run, chat, serve and mcp (unless trusted), in its {rules}")
}
