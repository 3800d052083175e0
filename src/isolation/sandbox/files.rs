//! Files: the Landlock ruleset of a [`Policy`], built in plughost (it
//! opens every path and allocates, which a forked child of a threaded
//! process must not) and enforced by the worker's process before `exec`
//! ([`super::spawn`]).
//!
//! Every file access right the kernel knows (up to ABI 6, which the crate
//! downgrades to what the kernel has) is handled, so whatever the rules do
//! not grant is denied: `open` fails with `EACCES` and the plugin gets
//! Python's ordinary `PermissionError`. Scoped too (ABI 6): signals to
//! processes outside the sandbox and abstract Unix sockets made outside it.

use std::os::fd::OwnedFd;

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};

use super::Policy;

/// The ABI whose rights plughost asks for.
const ABI_WANTED: ABI = ABI::V6;

/// The ruleset of `policy`, ready for `landlock_restrict_self`, or `None`
/// when the kernel has no Landlock (then files are not confined).
pub fn ruleset(policy: &Policy) -> Result<Option<OwnedFd>, String> {
    let fail = |e: landlock::RulesetError| format!("cannot build the Landlock ruleset: {e}");
    let read = AccessFs::from_read(ABI_WANTED);
    let all = AccessFs::from_all(ABI_WANTED);
    let device = AccessFs::from_file(ABI_WANTED) & !AccessFs::Execute;
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(fail)?
        .scope(Scope::from_all(ABI_WANTED))
        .map_err(fail)?
        .create()
        .map_err(fail)?;
    let sets = [
        (&policy.read, read),
        (&policy.write, all),
        (&policy.devices, device),
    ];
    for (paths, access) in sets {
        for path in paths {
            // A path that does not exist grants nothing.
            let Ok(fd) = PathFd::new(path) else { continue };
            let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
            let access = if is_dir {
                access
            } else {
                access & AccessFs::from_file(ABI_WANTED)
            };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(fail)?;
        }
    }
    Ok(Option::<OwnedFd>::from(created))
}
