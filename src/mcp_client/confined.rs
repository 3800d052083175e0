//! A stdio server started confined as the plugin that declared it (an
//! isolated bundle's, [`McpServerSpec::sandboxed`]): the same Landlock
//! rules, seccomp filter, namespaces, proxy, no-new-privileges, limits and
//! cgroup the plugin's worker gets (`crate::isolation::sandbox`), set up
//! between `fork` and `exec` of the server's process. Its program is one
//! more readable path (found on `PATH` when the command is a bare name),
//! with its installation when it lies in a `bin` directory (a Node or
//! Python outside `/usr`).
//!
//! Package runners (`npx`, `uvx`) keep caches under the user's home,
//! which a confined server may not write: unless the server's own `env`
//! names them, `XDG_CACHE_HOME` and `npm_config_cache` point into the
//! plugin's data directory.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use crate::isolation::sandbox::spawn::{confine, Confined};
use crate::isolation::LoadSpec;
use crate::plugins::config::{ResourceLimits, SandboxedAs};

/// Set `cmd` (the server `command` with environment `env`) up to start
/// confined as `plugin` of the host at `home`; `None` when that plugin's
/// sandbox is off.
pub fn prepare(
    cmd: &mut tokio::process::Command,
    plugin: &SandboxedAs,
    home: &Path,
    (command, env): (&str, &BTreeMap<String, String>),
) -> Result<Option<Confined>, String> {
    let load = LoadSpec {
        key: plugin.key.clone(),
        dir: plugin.dir.clone(),
        home: home.to_path_buf(),
        dialect: plugin.dialect.clone(),
        limits: ResourceLimits::default(),
        guard: false,
        // A server makes no calls into the host: none to carry.
        host: Default::default(),
    };
    let program = program_path(command, env).unwrap_or_else(|| PathBuf::from(command));
    let std_cmd = cmd.as_std_mut();
    let Some(confined) = confine(std_cmd, &load, &program)
        .map_err(|e| format!("cannot confine it as plugin '{}': {e}", plugin.key))?
    else {
        return Ok(None);
    };
    let caches = crate::isolation::sandbox::policy::data_dirs(home, &plugin.key)
        .pop()
        .map(|d| d.join(".cache"));
    if let Some(cache) = caches {
        for var in ["XDG_CACHE_HOME", "npm_config_cache"] {
            if !env.contains_key(var) {
                std_cmd.env(var, &cache);
            }
        }
    }
    if let Some(mb) = confined.policy.memory_mb {
        let bytes = mb.saturating_mul(1 << 20) as libc::rlim_t;
        // SAFETY: setrlimit is async-signal-safe and reads only `limit`,
        // on the child's stack.
        unsafe {
            std_cmd.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    Ok(Some(confined))
}

/// The file `command` runs: itself when it names a path, else the first
/// executable of that name on the server's `PATH` (its `env`'s, else
/// plughost's).
fn program_path(command: &str, env: &BTreeMap<String, String>) -> Option<PathBuf> {
    let path = env
        .get("PATH")
        .map(std::ffi::OsString::from)
        .or_else(|| std::env::var_os("PATH"));
    crate::isolation::sandbox::into_cgroup::find_program(command.as_ref(), path.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_command_is_found_on_the_servers_path() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("srv");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = BTreeMap::from([("PATH".to_string(), dir.path().display().to_string())]);
        assert_eq!(program_path("srv", &env), Some(tool));
        assert_eq!(program_path("absent-srv", &env), None);
        assert_eq!(
            program_path("/opt/x/bin/node", &env),
            Some(PathBuf::from("/opt/x/bin/node"))
        );
    }
}
