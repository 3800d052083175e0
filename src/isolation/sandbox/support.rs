//! What this kernel lets plughost enforce, probed once per process; what
//! it cannot is said at start ([`warn_once`]) and on every sandbox line of
//! `plugins doctor` ([`super::describe`]).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The confinement mechanisms this kernel offers to plughost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Support {
    /// Landlock's ABI version (files), if any.
    pub landlock_abi: Option<i32>,
    /// A user namespace of its own (no capability outside it).
    pub user_namespace: bool,
    /// A network namespace of its own (`network` rules).
    pub network_namespace: bool,
    /// The cgroup (v2) under which each worker gets one (the process tree).
    pub cgroup_parent: Option<PathBuf>,
    /// seccomp filters (refusing Unix sockets).
    pub seccomp: bool,
}

impl Support {
    /// What cannot be enforced here, each naming the mechanism missing.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.landlock_abi.is_none() {
            out.push("file rules (the kernel has no Landlock)");
        }
        if !self.network_namespace {
            out.push("network rules (no network namespaces)");
        }
        if !self.seccomp {
            out.push("refusing Unix sockets (no seccomp)");
        }
        if self.cgroup_parent.is_none() {
            out.push("ending setsid children with the worker (no writable cgroup v2)");
        }
        out
    }
}

static SUPPORT: OnceLock<Support> = OnceLock::new();

/// The probe's result (probed at the first call: a few system calls and
/// one short-lived child process).
pub fn support() -> &'static Support {
    SUPPORT.get_or_init(probe)
}

/// Log once per process what the kernel cannot enforce (nothing when it
/// can enforce everything).
pub fn warn_once() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let s = support();
        let missing = s.missing();
        if missing.is_empty() {
            tracing::debug!("sandbox: Landlock ABI {:?}, namespaces and cgroup available", s.landlock_abi);
        } else {
            tracing::warn!(
                "sandbox: this kernel cannot enforce {}; third-party plugins run confined by what it has (no_new_privs, resource limits{}{})",
                missing.join(", "),
                if s.landlock_abi.is_some() { ", Landlock file rules" } else { "" },
                if s.network_namespace { ", network namespaces" } else { "" },
            );
        }
    });
}

fn probe() -> Support {
    // SAFETY: landlock_create_ruleset with a null attribute, size 0 and
    // LANDLOCK_CREATE_RULESET_VERSION only returns the ABI version (or -1).
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    let landlock_abi = (abi > 0).then_some(abi as i32);
    let user_namespace = child_can_unshare(libc::CLONE_NEWUSER);
    let network_namespace = if user_namespace {
        child_can_unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET)
    } else {
        child_can_unshare(libc::CLONE_NEWNET)
    };
    Support {
        landlock_abi,
        user_namespace,
        network_namespace,
        cgroup_parent: cgroup_parent(),
        seccomp: std::fs::read_to_string("/proc/self/status")
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp:"))),
    }
}

/// Whether a child process can `unshare(flags)`.
fn child_can_unshare(flags: libc::c_int) -> bool {
    let program = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("true");
    let mut cmd = std::process::Command::new(program);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the closure runs between fork and exec and calls only
    // unshare(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(flags) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.status().is_ok_and(|s| s.success())
}

/// This process's cgroup v2 directory, when plughost may make cgroups
/// under it (it is root, or systemd delegated it) and kill them whole
/// (`cgroup.kill`, Linux 5.14).
fn cgroup_parent() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let dir = mount.join(rel.trim_start_matches('/'));
    let probe = dir.join(format!("plughost-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    let usable = probe.join("cgroup.kill").exists() && probe.join("cgroup.procs").exists();
    let _ = std::fs::remove_dir(&probe);
    if usable {
        super::tree::sweep(&dir);
    }
    usable.then_some(dir)
}
