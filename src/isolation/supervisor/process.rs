//! A worker's process as its supervisor holds it: started by `std`, or
//! created straight inside its cgroup by the sandbox
//! ([`crate::isolation::sandbox::into_cgroup`]).

use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};

use crate::isolation::sandbox::into_cgroup::ClonedChild;

#[derive(Debug)]
pub enum WorkerProcess {
    Std(std::process::Child),
    InCgroup(ClonedChild),
}

impl WorkerProcess {
    /// Start `cmd` by `std` with `stdin` and `stdout` as its fd 0 and 1,
    /// stderr inherited: an unconfined worker, or a confined one the
    /// kernel would not create in its cgroup.
    pub fn spawn(
        cmd: &mut std::process::Command,
        stdin: OwnedFd,
        stdout: OwnedFd,
    ) -> std::io::Result<WorkerProcess> {
        cmd.stdin(Stdio::from(stdin))
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::inherit())
            .spawn()
            .map(WorkerProcess::Std)
    }

    pub fn id(&self) -> u32 {
        match self {
            WorkerProcess::Std(c) => c.id(),
            WorkerProcess::InCgroup(c) => c.id(),
        }
    }

    pub fn kill(&mut self) -> std::io::Result<()> {
        match self {
            WorkerProcess::Std(c) => c.kill(),
            WorkerProcess::InCgroup(c) => c.kill(),
        }
    }

    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            WorkerProcess::Std(c) => c.wait(),
            WorkerProcess::InCgroup(c) => c.wait(),
        }
    }

    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        match self {
            WorkerProcess::Std(c) => c.try_wait(),
            WorkerProcess::InCgroup(c) => c.try_wait(),
        }
    }
}
