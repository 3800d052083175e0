//! Sockets: a seccomp filter that refuses `socket(AF_UNIX, …)` with
//! `EACCES` (Python's `PermissionError`).
//!
//! Landlock before ABI 9 does not check `connect(2)` to a pathname Unix
//! socket, so without this a confined plugin could still talk to any
//! daemon whose socket the user may open (`/run/docker.sock` would be a
//! way out of every other rule). Socket pairs (`socketpair(2)`, which
//! asyncio's loop uses) and inherited sockets still work; what a plugin
//! cannot do is open a Unix socket of its own, to connect or to listen.
//! The program is built by plughost (seccompiler allocates) and installed
//! by the child before `exec` ([`super::spawn`]); it is inherited by all
//! the worker starts.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The filter's program for this machine's architecture.
pub fn program() -> Result<BpfProgram, String> {
    let fail = |e: seccompiler::BackendError| format!("cannot build the seccomp filter: {e}");
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("no seccomp filter for this architecture: {e:?}"))?;
    let unix = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::AF_UNIX as u64,
    )
    .map_err(fail)?;
    let rules = [(
        libc::SYS_socket,
        vec![SeccompRule::new(vec![unix]).map_err(fail)?],
    )]
    .into_iter()
    .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(fail)?;
    filter.try_into().map_err(fail)
}
