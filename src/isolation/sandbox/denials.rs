//! Saying which rule denied an access, once: the kernel refuses it (the
//! plugin gets its ordinary `PermissionError` or refused connection) but
//! tells no one why, so the worker watches the plugin's `open` and
//! `socket.connect` (a CPython audit hook, in C, installed before the
//! plugin loads) and logs to plughost's log, once per path or address,
//! the access its rules do not grant, naming the setting that would.
//!
//! The hook only reports; the rules are enforced by the kernel whether
//! it runs or not (a plugin can open files without Python's `open`). An
//! event it does not name costs a string comparison.

use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use pyo3::ffi;
use serde::{Deserialize, Serialize};

use crate::plugins::config::NetworkRule;

/// What the worker is told of its confinement (in its Load request).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Watch {
    pub key: String,
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub network: NetworkRule,
}

impl Watch {
    pub fn of(policy: &super::Policy) -> Watch {
        // Device files are read and written.
        let mut write = policy.write.clone();
        write.extend(policy.devices.iter().cloned());
        Watch {
            key: policy.key.clone(),
            read: policy.read.iter().map(|p| canonical(p)).collect(),
            write: write.iter().map(|p| canonical(p)).collect(),
            network: policy.network.clone(),
        }
    }

    /// Why `path` (already absolute and canonical) is denied for writing
    /// (`write`) or reading, if it is.
    fn denies(&self, path: &Path, write: bool) -> Option<String> {
        let under = |roots: &[PathBuf]| roots.iter().any(|r| path.starts_with(r));
        if write && !under(&self.write) {
            return Some(format!(
                "it may write only under {} (add the path to plugins.entries.{}.sandbox.write)",
                shown(&self.write),
                self.key
            ));
        }
        if !write && !under(&self.write) && !under(&self.read) {
            return Some(format!(
                "it may read only the system, its interpreter and environment, its own directory and its write paths (add the path to plugins.entries.{}.sandbox.read)",
                self.key
            ));
        }
        None
    }
}

fn shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

static WATCH: OnceLock<Watch> = OnceLock::new();
static LOGGED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

unsafe extern "C" {
    // CPython's (3.8+); pyo3-ffi does not declare it. May be called
    // before the interpreter starts.
    fn PySys_AddAuditHook(
        hook: unsafe extern "C" fn(*const c_char, *mut ffi::PyObject, *mut c_void) -> c_int,
        user_data: *mut c_void,
    ) -> c_int;
}

/// Watch this worker's plugin under `watch` (before it loads).
pub fn install(watch: Watch) {
    if WATCH.set(watch).is_err() {
        return;
    }
    // SAFETY: registers a hook function with the signature CPython
    // expects; documented as callable before Py_Initialize (the binary's
    // worker) and after it (the wheel's, where the caller holds the GIL:
    // the worker's main thread, before any plugin code).
    let rc = unsafe { PySys_AddAuditHook(hook, std::ptr::null_mut()) };
    if rc != 0 {
        eprintln!("plughost worker: cannot watch the sandbox's denials (audit hook refused)");
    }
}

unsafe extern "C" fn hook(event: *const c_char, args: *mut ffi::PyObject, _: *mut c_void) -> c_int {
    // SAFETY: CPython calls audit hooks with the GIL held, a valid event
    // name and a tuple of arguments; only borrowed references are read
    // here and every new one is released.
    unsafe {
        let name = CStr::from_ptr(event).to_bytes();
        match name {
            b"open" => on_open(args),
            b"socket.connect" => on_connect(args),
            _ => {}
        }
    }
    0
}

/// `open(path, mode, flags)`: `mode` a string (`io.open`) or None
/// (`os.open`, with `flags`).
unsafe fn on_open(args: *mut ffi::PyObject) {
    let Some(watch) = WATCH.get() else { return };
    // SAFETY: `args` is the event's tuple (see `hook`).
    unsafe {
        if ffi::PyTuple_Check(args) == 0 || ffi::PyTuple_Size(args) < 3 {
            return;
        }
        let Some(path) = text_of_path(ffi::PyTuple_GetItem(args, 0)) else {
            ffi::PyErr_Clear();
            return;
        };
        let mode = ffi::PyTuple_GetItem(args, 1);
        let write = if ffi::PyUnicode_Check(mode) != 0 {
            let m = ffi::PyUnicode_AsUTF8AndSize(mode, std::ptr::null_mut());
            !m.is_null()
                && CStr::from_ptr(m)
                    .to_bytes()
                    .iter()
                    .any(|c| b"wax+".contains(c))
        } else {
            let flags = ffi::PyLong_AsLong(ffi::PyTuple_GetItem(args, 2));
            flags != -1
                && flags as c_int
                    & (libc::O_WRONLY
                        | libc::O_RDWR
                        | libc::O_CREAT
                        | libc::O_TRUNC
                        | libc::O_APPEND)
                    != 0
        };
        ffi::PyErr_Clear();
        let path = absolute(Path::new(&path));
        if !write && std::fs::symlink_metadata(&path).is_err() {
            // Not there: the plugin gets FileNotFoundError, not a denial.
            return;
        }
        let path = canonical(&path);
        if let Some(why) = watch.denies(&path, write) {
            let what = if write { "writing" } else { "reading" };
            once(format!(
                "plughost sandbox: plugin '{}' was denied {what} {} by its sandbox: {why}",
                watch.key,
                path.display()
            ));
        }
    }
}

/// `socket.connect(socket, address)`.
unsafe fn on_connect(args: *mut ffi::PyObject) {
    let Some(watch) = WATCH.get() else { return };
    let rule = match &watch.network {
        NetworkRule::Any => return,
        NetworkRule::None => {
            "its sandbox's network is none (plugins.entries.KEY.sandbox.network)".to_string()
        }
        NetworkRule::Hosts(hosts) => format!(
            "its sandbox lets it reach only {} through plughost's proxy (HTTP_PROXY)",
            hosts.join(", ")
        ),
    };
    // SAFETY: `args` is the event's tuple (see `hook`); `str()` of the
    // address is a new reference, released.
    let address = unsafe {
        if ffi::PyTuple_Check(args) == 0 || ffi::PyTuple_Size(args) < 2 {
            return;
        }
        let addr = ffi::PyTuple_GetItem(args, 1);
        if ffi::PyTuple_Check(addr) == 0 {
            // A Unix socket's path (refused by the seccomp filter anyway).
            return;
        }
        let s = ffi::PyObject_Str(addr);
        if s.is_null() {
            ffi::PyErr_Clear();
            return;
        }
        let p = ffi::PyUnicode_AsUTF8AndSize(s, std::ptr::null_mut());
        let text = (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned());
        ffi::Py_DecRef(s);
        ffi::PyErr_Clear();
        let Some(text) = text else { return };
        text
    };
    if matches!(watch.network, NetworkRule::Hosts(_))
        && address == format!("('127.0.0.1', {})", super::proxy::PORT)
    {
        return;
    }
    once(format!(
        "plughost sandbox: plugin '{}' was refused a connection to {address}: {}",
        watch.key,
        rule.replace("KEY", &watch.key)
    ));
}

/// `path` as text: a str, bytes, or an `os.PathLike`; `None` for a file
/// descriptor.
unsafe fn text_of_path(obj: *mut ffi::PyObject) -> Option<String> {
    // SAFETY: `obj` is a borrowed reference from the event's tuple;
    // PyOS_FSPath returns a new reference, released.
    unsafe {
        if obj.is_null() || ffi::PyLong_Check(obj) != 0 {
            return None;
        }
        let fs = ffi::PyOS_FSPath(obj);
        if fs.is_null() {
            return None;
        }
        let out = if ffi::PyUnicode_Check(fs) != 0 {
            let p = ffi::PyUnicode_AsUTF8AndSize(fs, std::ptr::null_mut());
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        } else if ffi::PyBytes_Check(fs) != 0 {
            let p = ffi::PyBytes_AsString(fs);
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        } else {
            None
        };
        ffi::Py_DecRef(fs);
        out
    }
}

fn absolute(path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `path` with symbolic links resolved as far as it exists.
fn canonical(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if parent != path => canonical(parent).join(name),
        _ => path.to_path_buf(),
    }
}

fn once(message: String) {
    let mut logged = LOGGED.lock().unwrap_or_else(|e| e.into_inner());
    if logged
        .get_or_insert_with(HashSet::new)
        .insert(message.clone())
    {
        eprintln!("{message}");
    }
}
