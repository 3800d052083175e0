//! The OS resource limits a worker puts on itself (`plugins.limits`),
//! and how going past one is recognised, so the call fails naming it.
//!
//! - Memory: `RLIMIT_DATA` (heap and private writable mappings, the
//!   memory a plugin allocates; shared libraries and reserved address
//!   space do not count). An allocation past it fails, Python raises
//!   `MemoryError`, and the worker ends itself ([`is_out_of_memory`]).
//! - CPU time: `RLIMIT_CPU`, counted by the kernel for the whole process
//!   (all its threads), so it is re-armed as each request starts
//!   ([`rearm_cpu`]): the limit becomes the CPU time used so far plus
//!   `cpu_seconds`. It is one limit for the process, not one per call:
//!   the setting made when the latest request started is the one in
//!   force, and calls running at the same time draw on it together. Past
//!   it the kernel sends `SIGXCPU`, which ends the worker.

use nix::sys::resource::{getrlimit, getrusage, setrlimit, Resource, UsageWho};

use crate::core::outcome::PluginError;
use crate::plugins::config::ResourceLimits;

/// Put `limits` on this process (before the plugin loads).
pub fn apply(limits: &ResourceLimits) -> Result<(), String> {
    if let Some(mb) = limits.memory_mb {
        let bytes = mb.saturating_mul(1 << 20);
        let (_, hard) = getrlimit(Resource::RLIMIT_DATA)
            .map_err(|e| format!("cannot read the memory limit: {e}"))?;
        // Soft and hard alike, so the plugin cannot lift it.
        let cap = bytes.min(hard);
        setrlimit(Resource::RLIMIT_DATA, cap, cap)
            .map_err(|e| format!("cannot set the memory limit to {mb} MiB: {e}"))?;
    }
    if let Some(seconds) = limits.cpu_seconds {
        rearm_cpu(seconds)?;
    }
    Ok(())
}

/// Allow `seconds` more CPU time from now (whole seconds, as the kernel counts).
pub fn rearm_cpu(seconds: u64) -> Result<(), String> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)
        .map_err(|e| format!("cannot read the CPU time used: {e}"))?;
    let (user, system) = (usage.user_time(), usage.system_time());
    let micros = (user.tv_sec() + system.tv_sec()) as u64 * 1_000_000
        + (user.tv_usec() + system.tv_usec()) as u64;
    let used = micros.div_ceil(1_000_000);
    let (_, hard) =
        getrlimit(Resource::RLIMIT_CPU).map_err(|e| format!("cannot read the CPU limit: {e}"))?;
    let soft = used.saturating_add(seconds).min(hard);
    setrlimit(Resource::RLIMIT_CPU, soft, hard)
        .map_err(|e| format!("cannot set the CPU limit to {seconds} s: {e}"))
}

/// Whether a failure is the memory limit biting (Python's `MemoryError`,
/// by its exception type).
pub fn is_out_of_memory(error: &PluginError) -> bool {
    error.kind == "MemoryError"
}
