//! Starting a confined worker inside its cgroup (`clone3` with
//! `CLONE_INTO_CGROUP`, Linux 5.7) instead of moving it there once started.
//!
//! A move (a write to `cgroup.procs`) takes the kernel's cgroup
//! write lock, whose first taking after a quiet spell waits for an RCU
//! grace period: 7–14 ms measured here, against 0.1–0.3 ms for a child
//! created in the cgroup. No plugin code may run before the worker is in
//! its cgroup, so a move stood between the worker's start and its `Load`
//! request, where it was most of what confinement added to a start.
//!
//! `std::process::Command` cannot create a child in a cgroup, so this
//! starts the process itself from the command's program, arguments and
//! environment: `clone3`, then in the child only async-signal-safe system
//! calls on memory prepared before it (the descriptors for stdin and
//! stdout, its own process group, the signal mask and `SIGPIPE` reset as
//! `std` resets them, the confinement, `execve`), and a close-on-exec pipe
//! that carries an `errno` back when something before `exec` failed.
//! Where `clone3` refuses (an older kernel, a seccomp profile that hides
//! it), the caller starts the worker with `std` and moves it.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};

/// `CLONE_INTO_CGROUP` (linux/sched.h); not in the `libc` crate for glibc.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` up to its `cgroup` field (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// A step before `exec` that failed in the child: the step's number (the
/// caller names it) and its `errno`. Plain numbers, so the child of a
/// threaded process reports it without allocating.
#[derive(Clone, Copy, Debug)]
pub struct Refused {
    pub step: u8,
    pub errno: i32,
}

impl Refused {
    /// As `std`'s `pre_exec` carries a failure: its `errno` alone.
    pub fn into_io(self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno)
    }
}

/// Why no child was created here.
#[derive(Debug)]
pub enum NotStarted {
    /// `clone3` into a cgroup is not available: start it the usual way.
    Unsupported(std::io::Error),
    /// It was created and failed before or at `exec` (the `errno`), or
    /// what it needs could not be prepared.
    Failed(std::io::Error),
}

/// A child started by [`spawn`]: what `std::process::Child` offers the
/// supervisor (its id, `kill`, `wait`, `try_wait`).
#[derive(Debug)]
pub struct ClonedChild {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
}

impl ClonedChild {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    pub fn kill(&mut self) -> std::io::Result<()> {
        if self.status.is_some() {
            return Ok(()); // reaped: the pid may be another process's now
        }
        // SAFETY: a signal to our own unreaped child.
        if unsafe { libc::kill(self.pid, libc::SIGKILL) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.reap(libc::WNOHANG)
    }

    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.reap(0)? {
                return Ok(status);
            }
        }
    }

    fn reap(&mut self, flags: libc::c_int) -> std::io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let mut raw = 0;
        loop {
            // SAFETY: waitpid on our own child, writing into `raw`.
            let got = unsafe { libc::waitpid(self.pid, &mut raw, flags) };
            if got == self.pid {
                let status = ExitStatus::from_raw(raw);
                self.status = Some(status);
                return Ok(Some(status));
            }
            if got == 0 {
                return Ok(None);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// What the child needs, prepared before `clone3`: nothing in the child
/// allocates.
struct Prepared {
    path: CString,
    _argv: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const libc::c_char>,
}

fn prepare(cmd: &Command) -> std::io::Result<Prepared> {
    let invalid = |what: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the worker's {what} holds a NUL byte"),
        )
    };
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (name, value) in cmd.get_envs() {
        match value {
            Some(v) => env.insert(name.to_os_string(), v.to_os_string()),
            None => env.remove(name),
        };
    }
    // (execvp's search when PATH is unset)
    let default_path = std::ffi::OsStr::new("/bin:/usr/bin");
    let search = env
        .get(std::ffi::OsStr::new("PATH"))
        .map_or(default_path, |p| p);
    let path = find_program(cmd.get_program(), Some(search))
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))?;
    let path = CString::new(path.into_os_string().into_vec()).map_err(|_| invalid("program"))?;
    let mut args =
        vec![CString::new(cmd.get_program().as_bytes()).map_err(|_| invalid("program"))?];
    for a in cmd.get_args() {
        args.push(CString::new(a.as_bytes()).map_err(|_| invalid("arguments"))?);
    }
    let mut vars = Vec::with_capacity(env.len());
    for (name, value) in env {
        let mut pair = name.into_vec();
        pair.push(b'=');
        pair.extend(value.into_vec());
        vars.push(CString::new(pair).map_err(|_| invalid("environment"))?);
    }
    let pointers = |v: &[CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|s| s.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    Ok(Prepared {
        path,
        argv: pointers(&args),
        _argv: args,
        envp: pointers(&vars),
        _envp: vars,
    })
}

/// The file `program` runs: itself when it names a path, else the first
/// executable of that name in `path` (a `PATH` value; `None`: not found).
pub(crate) fn find_program(
    program: &std::ffi::OsStr,
    path: Option<&std::ffi::OsStr>,
) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Start `cmd` with `stdin` and `stdout` as its fd 0 and 1 (stderr
/// inherited), in a process group of its own, inside the cgroup `cgroup`,
/// running `enter` before `exec`. `enter` runs in the child of a
/// threaded process: it may make only async-signal-safe calls and must
/// not allocate; its failure is named by `step_name`.
///
/// Of `cmd` this reads the program, the arguments and the environment's
/// changes (`env`, `env_remove`), all a worker's command sets
/// (`interpreter::command`); its stdio, directory, `env_clear`, `arg0`,
/// ids and `pre_exec` are not applied. A program without a `/` is looked
/// up on `PATH` as `execvp` would, minus its shell fallback for a file
/// with no `#!` line.
/// A failure before `exec` that is not one of `enter`'s names the step
/// `NO_STEP`: its `errno` alone is the error, as `std` reports it.
const NO_STEP: i32 = -1;

pub fn spawn(
    cmd: &Command,
    stdin: BorrowedFd<'_>,
    stdout: BorrowedFd<'_>,
    cgroup: &Path,
    enter: &(dyn Fn() -> Result<(), Refused> + Sync),
    step_name: fn(u8) -> &'static str,
) -> Result<ClonedChild, NotStarted> {
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return Err(NotStarted::Unsupported(std::io::Error::from_raw_os_error(
            libc::ENOSYS,
        )));
    }
    let prepared = prepare(cmd).map_err(NotStarted::Failed)?;
    // Every descriptor the child uses numbered 3 or more, so putting its
    // fd 0 and 1 in place overwrites none of them: in a process started
    // without fd 0 or 1 (a wheel's host may be) the caller's sockets and
    // this pipe can be 0 or 1. (`try_clone_to_owned` copies to 3 or more.)
    let (errors_in, errors_out) = pipe().map_err(NotStarted::Failed)?;
    let errors_out = above_stdio(errors_out).map_err(NotStarted::Failed)?;
    let stdin = stdin.try_clone_to_owned().map_err(NotStarted::Failed)?;
    let stdout = stdout.try_clone_to_owned().map_err(NotStarted::Failed)?;
    let dir = std::fs::File::open(cgroup).map_err(NotStarted::Unsupported)?;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    let (stdin, stdout, report) = (
        stdin.as_raw_fd(),
        stdout.as_raw_fd(),
        errors_out.as_raw_fd(),
    );
    // SAFETY: clone3 without CLONE_VM is a fork: the child gets a copy of
    // this address space and runs on, on a copy of this stack, only the
    // async-signal-safe calls of `in_child` on memory prepared above.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        // SAFETY: in the child; see `in_child`.
        unsafe { in_child(&prepared, stdin, stdout, report, enter) }
    }
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            // No clone3, or no CLONE_INTO_CGROUP (before Linux 5.7), or a
            // seccomp profile that refuses it: not worth asking again.
            Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM) => {
                UNSUPPORTED.store(true, Ordering::Relaxed);
                NotStarted::Unsupported(e)
            }
            // This cgroup refused (its permissions): the move will say why.
            Some(libc::EACCES) => NotStarted::Unsupported(e),
            // Out of processes or memory: as std's spawn would fail.
            _ => NotStarted::Failed(e),
        });
    }
    drop(errors_out);
    drop(dir);
    let mut child = ClonedChild {
        pid: pid as libc::pid_t,
        status: None,
    };
    match read_failure(&errors_in) {
        None => Ok(child),
        Some((errno, step)) => {
            let _ = child.kill();
            let _ = child.wait();
            let error = std::io::Error::from_raw_os_error(errno);
            Err(NotStarted::Failed(match u8::try_from(step) {
                Ok(step) => std::io::Error::new(
                    error.kind(),
                    format!("sandbox: {}: {error}", step_name(step)),
                ),
                Err(_) => error,
            }))
        }
    }
}

/// The child's side: descriptors, process group, signals, confinement,
/// `exec`; a failure's `errno` and step written to `report`, then
/// `_exit(127)`.
///
/// # Safety
/// Only in the child of `clone3`, on memory prepared before it.
unsafe fn in_child(
    prepared: &Prepared,
    stdin: RawFd,
    stdout: RawFd,
    report: RawFd,
    enter: &(dyn Fn() -> Result<(), Refused> + Sync),
) -> ! {
    // SAFETY: each call is async-signal-safe and touches only descriptors
    // and memory owned by this (child) process.
    unsafe {
        let fail_at = |errno: i32, step: i32| -> ! {
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&errno.to_ne_bytes());
            bytes[4..].copy_from_slice(&step.to_ne_bytes());
            libc::write(report, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127)
        };
        let fail = |errno: i32| -> ! { fail_at(errno, NO_STEP) };
        let errno = || *libc::__errno_location();
        for (from, to) in [(stdin, 0), (stdout, 1)] {
            let done = if from == to {
                libc::fcntl(to, libc::F_SETFD, 0) // keep it across exec
            } else {
                libc::dup2(from, to)
            };
            if done < 0 {
                fail(errno());
            }
        }
        if libc::setpgid(0, 0) != 0 {
            fail(errno());
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Rust ignores SIGPIPE in its own processes; a child gets the
        // default back, as `std`'s spawn gives it.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        if let Err(refused) = enter() {
            fail_at(refused.errno, i32::from(refused.step));
        }
        libc::execve(
            prepared.path.as_ptr(),
            prepared.argv.as_ptr(),
            prepared.envp.as_ptr(),
        );
        fail(errno())
    }
}

/// `clone3` into a cgroup was refused for good in this process.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// `fd`, or (closing it) a close-on-exec copy of it numbered 3 or more
/// when it is 0, 1 or 2.
fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor, owned from here.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just made, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, owned from here.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just opened and belong to nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The `errno` and step the child reported, `None` when it reached
/// `exec` (the pipe closed on it with nothing written).
fn read_failure(pipe: &OwnedFd) -> Option<(i32, i32)> {
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: read into the rest of `buf`.
        let n = unsafe {
            libc::read(
                pipe.as_raw_fd(),
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
            )
        };
        if n == 0 {
            break;
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Some((e.raw_os_error().unwrap_or(libc::EIO), NO_STEP));
        }
        got += n as usize;
    }
    let number = |at: usize| i32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
    match got {
        0 => None,
        8 => Some((number(0), number(4))),
        // (one write of 8 bytes to a pipe is atomic: never seen)
        _ => Some((libc::EIO, NO_STEP)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolation::sandbox::tree::Tree;
    use std::os::fd::{AsFd, AsRawFd};

    /// A cgroup to start children in; the test fails (never passes
    /// untested) where plughost could not make one.
    fn tree(name: &str) -> Tree {
        let support = crate::isolation::sandbox::support();
        let parent = support.cgroup_parent.as_ref().unwrap_or_else(|| {
            panic!("this test needs a writable cgroup v2 (run as root or in a delegated cgroup)")
        });
        Tree::create(parent, name).unwrap()
    }

    fn socket_pair() -> (OwnedFd, OwnedFd) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (OwnedFd::from(a), OwnedFd::from(b))
    }

    #[test]
    fn a_child_starts_inside_the_cgroup_with_the_commands_arguments_and_environment() {
        let tree = tree("into-cgroup-test");
        let (ours, theirs) = socket_pair();
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "cat /proc/self/cgroup; echo \"$GREETING\" \"$0\"; test -z \"$HOME_GONE\"",
        ])
        .env("GREETING", "hello")
        .env_remove("HOME_GONE");
        let enter = || Ok(());
        let mut child = spawn(
            &cmd,
            theirs.as_fd(),
            theirs.as_fd(),
            &tree.dir,
            &enter,
            |_| "",
        )
        .unwrap_or_else(|e| panic!("not started: {e:?}"));
        drop(theirs);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(ours), &mut out).unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "{status:?}: {out}");
        let name = tree.dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(out.contains(&format!("/{name}\n")), "not in {name}: {out}");
        assert!(out.contains("hello sh\n"), "{out}");
        assert_eq!(child.try_wait().unwrap(), Some(status));
        tree.kill_and_remove();
    }

    #[test]
    fn a_failure_before_exec_comes_back_named_with_its_errno_and_the_child_is_reaped() {
        let tree = tree("into-cgroup-fail");
        let (_ours, theirs) = socket_pair();
        let cmd = Command::new("sh");
        let refuse = || {
            Err(Refused {
                step: 1,
                errno: libc::EACCES,
            })
        };
        let names: fn(u8) -> &'static str = |step| ["first step", "second step"][step as usize];
        let (stdin, stdout) = (theirs.as_fd(), theirs.as_fd());
        match spawn(&cmd, stdin, stdout, &tree.dir, &refuse, names) {
            Err(NotStarted::Failed(e)) => {
                assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
                let text = e.to_string();
                assert!(text.starts_with("sandbox: second step: "), "{text}");
            }
            other => panic!("expected the child's EACCES, got {other:?}"),
        }
        let missing = Command::new("/nonexistent/plughost-worker");
        match spawn(&missing, stdin, stdout, &tree.dir, &|| Ok(()), names) {
            Err(NotStarted::Failed(e)) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT)),
            other => panic!("expected ENOENT from exec, got {other:?}"),
        }
        // Both children were reaped: the cgroup is empty again.
        let procs = std::fs::read_to_string(tree.dir.join("cgroup.procs")).unwrap();
        assert_eq!(procs.trim(), "", "left in the cgroup: {procs}");
        tree.kill_and_remove();
    }

    /// Set for [`with_stdio_closed`]'s run of itself: where it says it
    /// passed (its own stdout is closed).
    const STDIO_CLOSED: &str = "PLUGHOST_TEST_STDIO_CLOSED";

    /// What a plughost whose own fd 0 and 1 were closed does (a wheel in a
    /// process started without them): the descriptors it opens can then
    /// be 0 or 1. Run only by
    /// [`a_child_starts_right_when_plughosts_own_fd_0_and_1_were_closed`],
    /// in a process of its own.
    #[test]
    #[ignore = "run in a process of its own by a_child_starts_right_when_plughosts_own_fd_0_and_1_were_closed"]
    fn with_stdio_closed() {
        let passed = std::env::var_os(STDIO_CLOSED).expect("run by the test that needs it");
        let tree = tree("into-cgroup-stdio");
        let (ours_in, theirs_in) = socket_pair();
        let (_ours, theirs) = socket_pair(); // (for the second start)
                                             // SAFETY: this process is this test's alone; nothing else uses
                                             // fd 0 or 1 (what it prints is lost, which is why `passed`).
        unsafe { libc::close(0) };
        // The worker's stdout socket is fd 0.
        let (theirs_out, ours_out) = socket_pair();
        assert_eq!(theirs_out.as_raw_fd(), 0);
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo to-stdout"]);
        let (stdin, stdout) = (theirs_in.as_fd(), theirs_out.as_fd());
        let mut child = spawn(&cmd, stdin, stdout, &tree.dir, &|| Ok(()), |_| "")
            .unwrap_or_else(|e| panic!("not started: {e:?}"));
        drop((theirs_in, theirs_out));
        let status = child.wait().unwrap();
        let read = |fd: OwnedFd| {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut text).unwrap();
            text
        };
        assert!(status.success(), "{status:?}");
        assert_eq!(
            (read(ours_out), read(ours_in)),
            ("to-stdout\n".into(), String::new())
        );
        // The error pipe is fds 0 and 1: a failed exec is still reported.
        // SAFETY: as above.
        unsafe { libc::close(1) };
        let missing = Command::new("/nonexistent/plughost-worker");
        let (stdin, stdout) = (theirs.as_fd(), theirs.as_fd());
        let started = spawn(&missing, stdin, stdout, &tree.dir, &|| Ok(()), |_| "");
        tree.kill_and_remove();
        match started {
            Err(NotStarted::Failed(e)) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT)),
            other => panic!("expected ENOENT from exec, got {other:?}"),
        }
        std::fs::write(passed, "passed").unwrap();
    }

    #[test]
    fn a_child_starts_right_when_plughosts_own_fd_0_and_1_were_closed() {
        let dir = tempfile::tempdir().unwrap();
        let passed = dir.path().join("passed");
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "isolation::sandbox::into_cgroup::tests::with_stdio_closed",
                "--ignored",
                "--test-threads=1",
            ])
            .env(STDIO_CLOSED, &passed)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{text}");
        assert!(
            passed.exists(),
            "the inner test did not run to its end: {text}"
        );
    }

    #[test]
    fn a_program_without_a_slash_is_found_on_the_path_it_will_have() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("plughost-probe-tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = OsString::from(format!("/nonexistent:{}", dir.path().display()));
        let find = |name: &str| find_program(std::ffi::OsStr::new(name), Some(&path));
        assert_eq!(find("plughost-probe-tool"), Some(tool));
        assert_eq!(find("plughost-no-such-tool"), None);
        assert_eq!(find("/bin/sh"), Some(PathBuf::from("/bin/sh")));
    }
}
