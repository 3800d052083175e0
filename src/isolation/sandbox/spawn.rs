//! Confining a worker's process between `fork` and `exec`.
//!
//! Everything that allocates or opens paths is done in plughost first
//! ([`confine`]): the Landlock ruleset, the cgroup, the namespace maps'
//! text. The closure the child runs (`Child::enter`) makes only
//! async-signal-safe system calls, in this order: `unshare` a user namespace (and a network one for
//! network rules) and write its id maps, bring its loopback up, hand the
//! proxy's listening socket to plughost, `RLIMIT_CORE` 0,
//! `PR_SET_NO_NEW_PRIVS`, the seccomp filter ([`sockets`]),
//! `landlock_restrict_self`. Then `exec`: the
//! worker and all it starts inherit every one of them. A worker is
//! created inside its cgroup ([`Confined::spawn_worker`], see
//! [`into_cgroup`]); a bundle's MCP server, and a worker where the kernel
//! refuses that, is moved there once started ([`Confined::started`]),
//! before plughost sends the request that loads the plugin.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use super::into_cgroup::{self, NotStarted, Refused};
use super::{files, proxy, sockets, support, tree::Tree, Policy};
use crate::isolation::supervisor::LoadSpec;
use crate::isolation::supervisor::WorkerProcess;
use crate::plugins::config::NetworkRule;

/// A worker's confinement, as plughost keeps it while the worker runs.
pub struct Confined {
    pub policy: Policy,
    /// Its cgroup, killed when it ends.
    pub tree: Option<Tree>,
    /// The proxy that is its only way out (a list of hosts).
    pub proxy: Option<proxy::Pending>,
    /// What the child does before `exec`, until [`Confined::spawn_worker`]
    /// or [`confine`] hands it to the child.
    enter: Option<Child>,
    /// The child was created inside its cgroup: no move at its start.
    in_tree: bool,
}

/// What the child needs, prepared by plughost.
struct Child {
    ruleset: Option<OwnedFd>,
    user: bool,
    net: bool,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    proxy: Option<proxy::ChildEnd>,
    seccomp: Option<seccompiler::BpfProgram>,
}

/// Set `cmd` (a process of the plugin of `load`, running `program`: a
/// bundle's MCP server) up to start confined, or leave it as it is when
/// the plugin's sandbox is off; once started, [`Confined::started`] moves
/// it into its cgroup.
pub fn confine(
    cmd: &mut Command,
    load: &LoadSpec,
    program: &Path,
) -> Result<Option<Confined>, String> {
    let Some(mut confined) = prepare(cmd, load, program)? else {
        return Ok(None);
    };
    if let Some(child) = confined.enter.take() {
        child.before_exec_of(cmd);
    }
    Ok(Some(confined))
}

/// The confinement of the worker of `load` (running `program`), for
/// [`Confined::spawn_worker`]: `cmd` gets only its environment; `None`
/// when the plugin's sandbox is off.
pub fn prepare(
    cmd: &mut Command,
    load: &LoadSpec,
    program: &Path,
) -> Result<Option<Confined>, String> {
    let Some(policy) = super::policy_for(load, program)? else {
        return Ok(None);
    };
    let support = support::support();
    support::warn_once();
    let ruleset = if support.landlock_abi.is_some() {
        files::ruleset(&policy)?
    } else {
        None
    };
    let tree = match &support.cgroup_parent {
        Some(parent) => Some(
            Tree::create(parent, &load.key)
                .map_err(|e| format!("cannot make the worker's cgroup: {e}"))?,
        ),
        None => None,
    };
    let net = !matches!(policy.network, NetworkRule::Any) && support.network_namespace;
    let (proxy, child_end) = match &policy.network {
        NetworkRule::Hosts(hosts) if net => {
            let (pending, child_end) = proxy::prepare(&load.key, hosts.clone())?;
            for (name, value) in proxy::environment() {
                cmd.env(name, value);
            }
            for name in proxy::NO_PROXY {
                cmd.env_remove(name);
            }
            (Some(pending), Some(child_end))
        }
        _ => (None, None),
    };
    if policy.memory_mb.is_some() && std::env::var_os("MIMALLOC_ARENA_RESERVE").is_none() {
        // As interpreter::command does for plugins.limits' memory_mb.
        cmd.env("MIMALLOC_ARENA_RESERVE", "16MiB");
    }
    // SAFETY: getuid/getgid only read this process's credentials.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let child = Child {
        ruleset,
        user: support.user_namespace,
        net,
        uid_map: format!("{uid} {uid} 1").into_bytes(),
        gid_map: format!("{gid} {gid} 1").into_bytes(),
        proxy: child_end,
        seccomp: if support.seccomp && !policy.unix_sockets {
            Some(sockets::program()?)
        } else {
            None
        },
    };
    Ok(Some(Confined {
        policy,
        tree,
        proxy,
        enter: Some(child),
        in_tree: false,
    }))
}

/// A step of [`Child::enter`], named in the error of a worker that
/// failed it (`sandbox: unshare namespaces: Operation not permitted`).
#[derive(Clone, Copy, Debug)]
#[repr(u8)]
enum Step {
    Unshare,
    Setgroups,
    UidMap,
    GidMap,
    LoopbackSocket,
    LoopbackFlags,
    LoopbackUp,
    Proxy,
    RlimitCore,
    NoNewPrivs,
    Seccomp,
    Landlock,
}

const STEPS: [&str; 12] = [
    "unshare namespaces",
    "setgroups",
    "uid_map",
    "gid_map",
    "loopback socket",
    "read loopback flags",
    "bring loopback up",
    "hand the proxy's socket to plughost",
    "RLIMIT_CORE",
    "no_new_privs",
    "seccomp filter",
    "landlock_restrict_self",
];

// Every step has its name.
const _: () = assert!(STEPS.len() == Step::Landlock as usize + 1);

/// The name of step number `step` (for [`into_cgroup::spawn`]).
fn step_name(step: u8) -> &'static str {
    STEPS.get(step as usize).copied().unwrap_or("confinement")
}

/// `Err` with the step and `errno` when a system call answered `rc < 0`:
/// nothing allocates, in the child of a threaded process.
fn check(rc: libc::c_long, step: Step) -> Result<(), Refused> {
    if rc < 0 {
        return Err(refused(
            step,
            std::io::Error::last_os_error().raw_os_error(),
        ));
    }
    Ok(())
}

fn refused(step: Step, errno: Option<i32>) -> Refused {
    Refused {
        step: step as u8,
        errno: errno.unwrap_or(libc::EPERM),
    }
}

impl Child {
    /// Have `std` run [`enter`](Self::enter) in `cmd`'s child, which it
    /// forks; that keeps only the `errno` of a failed step.
    fn before_exec_of(self, cmd: &mut Command) {
        // SAFETY: `enter` makes only async-signal-safe system calls on
        // memory prepared before the fork (no allocation, no lock), as a
        // forked child of a threaded process must.
        unsafe {
            cmd.pre_exec(move || self.enter().map_err(Refused::into_io));
        }
    }

    /// Runs in the child between fork and exec (see the module docs).
    fn enter(&self) -> Result<(), Refused> {
        // SAFETY: raw system calls on descriptors and buffers owned by
        // `self` or the stack (paths are NUL-terminated C strings); each is
        // async-signal-safe, as the child of a threaded process needs.
        unsafe {
            let mut flags = 0;
            if self.user {
                flags |= libc::CLONE_NEWUSER;
            }
            if self.net {
                flags |= libc::CLONE_NEWNET;
            }
            if flags != 0 {
                check(libc::unshare(flags) as libc::c_long, Step::Unshare)?;
            }
            if self.user {
                write_file(c"/proc/self/setgroups".as_ptr(), b"deny", Step::Setgroups)?;
                write_file(c"/proc/self/uid_map".as_ptr(), &self.uid_map, Step::UidMap)?;
                write_file(c"/proc/self/gid_map".as_ptr(), &self.gid_map, Step::GidMap)?;
            }
            if self.net {
                loopback_up()?;
            }
            if let Some(end) = &self.proxy {
                end.hand_over()
                    .map_err(|e| refused(Step::Proxy, e.raw_os_error()))?;
            }
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            check(
                libc::setrlimit(libc::RLIMIT_CORE, &none) as libc::c_long,
                Step::RlimitCore,
            )?;
            check(
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long,
                Step::NoNewPrivs,
            )?;
            if let Some(program) = &self.seccomp {
                if let Err(e) = seccompiler::apply_filter(program) {
                    let errno = match &e {
                        seccompiler::Error::Prctl(io) | seccompiler::Error::Seccomp(io) => {
                            io.raw_os_error()
                        }
                        _ => Some(libc::EINVAL),
                    };
                    return Err(refused(Step::Seccomp, errno));
                }
            }
            if let Some(ruleset) = &self.ruleset {
                check(
                    libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32),
                    Step::Landlock,
                )?;
            }
        }
        Ok(())
    }
}

/// Write `bytes` to the file at `path` (a C string).
///
/// # Safety
/// `path` must be a valid NUL-terminated string.
unsafe fn write_file(path: *const libc::c_char, bytes: &[u8], step: Step) -> Result<(), Refused> {
    // SAFETY: open/write/close on a path the caller vouches for and a
    // buffer of `bytes.len()` bytes.
    unsafe {
        let fd = libc::open(path, libc::O_WRONLY | libc::O_CLOEXEC);
        check(fd as libc::c_long, step)?;
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let written = check(n as libc::c_long, step);
        libc::close(fd);
        written
    }
}

/// Bring the new network namespace's loopback up, so a connection to the
/// host's loopback is refused (nothing listens in here) rather than the
/// network being unreachable, and so the proxy's port is reachable.
fn loopback_up() -> Result<(), Refused> {
    // SAFETY: a datagram socket for the interface ioctls, a zeroed ifreq
    // owned here (name "lo"), and close.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        check(s as libc::c_long, Step::LoopbackSocket)?;
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let got = libc::ioctl(s, libc::SIOCGIFFLAGS, &mut req);
        if got == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            let set = check(
                libc::ioctl(s, libc::SIOCSIFFLAGS, &req) as libc::c_long,
                Step::LoopbackUp,
            );
            libc::close(s);
            return set;
        }
        let read = check(got as libc::c_long, Step::LoopbackFlags);
        libc::close(s);
        read
    }
}

impl Confined {
    /// The worker `pid` started: serve its proxy, and once it has ended
    /// (however: a crash, a kill, its stream closed) kill what is left of
    /// its tree and stop its proxy. A thread waits for it without reaping
    /// it (its supervisor reaps it).
    pub fn started(self, pid: u32) -> Result<(), String> {
        if let Some(tree) = self.tree.as_ref().filter(|_| !self.in_tree) {
            // Moved in from here, not by the child before exec: no
            // plugin code has run yet (it loads on the first request, sent
            // after this). A move waits for the kernel (7–14 ms measured,
            // see `into_cgroup`), which is why a worker is created in its
            // cgroup where it can be.
            if let Err(e) = std::fs::write(tree.dir.join("cgroup.procs"), pid.to_string()) {
                tree.kill_and_remove();
                return Err(format!("cannot move the worker into its cgroup: {e}"));
            }
        }
        let proxy = match self.proxy.map(|pending| pending.start()).transpose() {
            Ok(proxy) => proxy,
            Err(problem) => {
                if let Some(tree) = &self.tree {
                    tree.kill_and_remove();
                }
                return Err(problem);
            }
        };
        let tree = self.tree;
        std::thread::Builder::new()
            .name("plughost-sandbox".into())
            .spawn(move || {
                // SAFETY: waitid writes only into `info`, a zeroed
                // siginfo_t owned here; WNOWAIT leaves the child for its
                // supervisor to reap (ECHILD: it already did).
                unsafe {
                    let mut info: libc::siginfo_t = std::mem::zeroed();
                    while libc::waitid(
                        libc::P_PID,
                        pid as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOWAIT,
                    ) != 0
                        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                    {
                    }
                }
                if let Some(tree) = tree {
                    tree.kill_and_remove();
                }
                if let Some(proxy) = proxy {
                    proxy.stop();
                }
            })
            .map(|_| ())
            .map_err(|e| format!("cannot watch the worker's process tree: {e}"))
    }

    /// Start the worker `cmd` (from [`prepare`]) confined, with `stdin`
    /// and `stdout` its ends of the protocol stream: created inside its
    /// cgroup where the kernel can (see [`super::into_cgroup`]), else
    /// started by `std` and moved there by [`Confined::started`].
    pub fn spawn_worker(
        &mut self,
        cmd: &mut Command,
        stdin: OwnedFd,
        stdout: OwnedFd,
    ) -> std::io::Result<WorkerProcess> {
        let Some(child) = self.enter.take() else {
            return Err(std::io::Error::other(
                "sandbox: the worker was started already",
            ));
        };
        if let Some(tree) = &self.tree {
            let enter = || child.enter();
            let (stdin, stdout) = (stdin.as_fd(), stdout.as_fd());
            match into_cgroup::spawn(cmd, stdin, stdout, &tree.dir, &enter, step_name) {
                Ok(started) => {
                    self.in_tree = true;
                    return Ok(WorkerProcess::InCgroup(started));
                }
                Err(NotStarted::Failed(e)) => return Err(e),
                Err(NotStarted::Unsupported(e)) => {
                    tracing::debug!("sandbox: clone3 into a cgroup refused ({e}); the worker is moved there once started");
                }
            }
        }
        child.before_exec_of(cmd);
        WorkerProcess::spawn(cmd, stdin, stdout)
    }

    /// The worker did not start: remove what was made for it.
    pub fn abandoned(self) {
        if let Some(tree) = self.tree {
            tree.kill_and_remove();
        }
    }
}
