//! The crash journal: which in-process plugin plughost was inside when it
//! died, so the next start runs that plugin isolated instead of crashing
//! the same way (see `docs/reliability.md`).
//!
//! Each process writes one small file, `<home>/crash-journal/<pid>`, with a
//! fixed-size record overwritten in place before it enters a plugin's code
//! ("in plugin X, doing Y") and cleared when it comes back; the file is
//! removed when the process is done with it. No `fsync`: a process crash
//! leaves the page cache intact, which is all the journal must survive.
//! A file whose process is gone and whose record is not clear names the
//! plugin that took its process down: [`quarantine`] moves it into the
//! home's `crash-journal/isolated` list, whose plugins run isolated until
//! the user takes them off it.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The record's size: a plugin key and what it was doing, truncated.
const RECORD: usize = 256;

/// A store's width on the record.
const WORD: usize = 8;
const _: () = assert!(RECORD.is_multiple_of(WORD), "the record is whole words");

/// The directory of the journals under a home.
pub fn directory(home: &Path) -> PathBuf {
    home.join("crash-journal")
}

/// The list of plugins that crashed plughost (one `key<TAB>what` a line).
pub fn isolated_list(home: &Path) -> PathBuf {
    directory(home).join("isolated")
}

/// This process's journal; dropping it removes the file.
///
/// The record is the file's first page mapped shared into memory: writing
/// it is a few stores, where two `pwrite`s a plugin call cost a tool call
/// with three hooks about 8 µs. A process crash leaves the mapping's dirty
/// page in the page cache, exactly as it left `pwrite`'s: no `fsync`
/// either way.
pub struct Journal {
    map: NonNull<u8>,
    _file: File,
    path: PathBuf,
}

// SAFETY: the mapping is plain process memory that lives as long as the
// `Journal`; every access to it goes through `AtomicU64`s (see `words`),
// so threads entering and leaving plugins at once never race on it.
unsafe impl Send for Journal {}
// SAFETY: as for `Send`: shared access is only ever atomic.
unsafe impl Sync for Journal {}

impl Journal {
    /// Open this process's journal under `home`; `None` when it cannot be
    /// written (a read-only home): plughost then runs without one.
    pub fn open(home: &Path) -> Option<Journal> {
        let dir = directory(home);
        std::fs::create_dir_all(&dir).ok()?;
        let path = dir.join(std::process::id().to_string());
        // Not truncated: two hosts of one process over one home open the
        // same file, and truncating it under the other's mapping made that
        // host's next store a SIGBUS (seen in the wheel's many-threads
        // test). A stale record (a reused pid) is cleared below instead.
        #[allow(clippy::suspicious_open_options)]
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .open(&path)
            .ok()?;
        file.set_len(RECORD as u64).ok()?;
        // SAFETY: maps RECORD bytes of a file this process just created and
        // sized to RECORD, shared so the stores reach the page cache; the
        // result is checked for MAP_FAILED before use.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RECORD,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let _ = std::fs::remove_file(&path);
            return None;
        }
        let journal = Journal {
            map: NonNull::new(map.cast::<u8>())?,
            _file: file,
            path,
        };
        journal.leave();
        Some(journal)
    }

    /// The record, as words: a record is written a word at a time, not a
    /// byte at a time (8 stores for a typical record instead of 60).
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `map` points to RECORD mapped, writable bytes that stay
        // mapped until `drop`; the mapping is page-aligned, so aligned for
        // `AtomicU64` (RECORD is a multiple of 8), and nothing reaches these
        // bytes but through this slice.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<AtomicU64>(), RECORD / WORD) }
    }

    /// plughost enters plugin code to do what `record` says: a few stores
    /// (the record is made beforehand, [`Record::new`]).
    pub fn enter_record(&self, record: &Record) {
        let words = self.words();
        for (cell, word) in words.iter().zip(record.words.iter()).skip(1) {
            cell.store(*word, Ordering::Relaxed);
        }
        // The first word goes last: a record is read up to its first NUL,
        // so a clear record still reads as clear until that store (one
        // overwritten without being cleared, as the byte stores did, can
        // read as a mix of both meanwhile).
        words[0].store(record.words[0], Ordering::Release);
    }

    /// It came back: the record reads as clear from its first byte.
    pub fn leave(&self) {
        self.words()[0].store(0, Ordering::Release);
    }
}

/// One record, `key<TAB>what`, as the words [`Journal::enter_record`]
/// stores: made once for what is entered on every call (a tool, a hook's
/// event), instead of on each entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Up to and including the word that holds the NUL after the text.
    words: Box<[u64]>,
}

impl Record {
    pub fn new(key: &str, what: &str) -> Record {
        // Cut to leave room for its NUL (the reader takes what it can
        // decode); no formatting machinery.
        let mut record = [0u8; RECORD];
        let mut len = 0;
        for part in [key.as_bytes(), b"\t", what.as_bytes()] {
            let n = part.len().min(RECORD - 1 - len);
            record[len..len + n].copy_from_slice(&part[..n]);
            len += n;
        }
        let words = record
            .chunks_exact(WORD)
            .take(len / WORD + 1)
            .map(|chunk| {
                let mut bytes = [0u8; WORD];
                bytes.copy_from_slice(chunk);
                u64::from_ne_bytes(bytes)
            })
            .collect();
        Record { words }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `open` made; `words` borrows
        // `self`, so no reference into it outlives this call.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), RECORD);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A plugin on the home's isolated list: its key and what it was doing
/// when it took plughost down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crashed {
    pub key: String,
    pub what: String,
}

/// Move every journal left by a dead process into the isolated list
/// (warning once for each, naming the plugin), then return the whole list.
pub fn quarantine(home: &Path) -> Vec<Crashed> {
    let dir = directory(home);
    let mut list = read_list(home);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return list;
    };
    let mut added = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid as u32 == std::process::id() || process_lives(pid) {
            continue;
        }
        let Some(crashed) = read_record(&entry.path()) else {
            let _ = std::fs::remove_file(entry.path());
            continue;
        };
        tracing::warn!(
            "plugin '{}' crashed plughost (process {pid}) during {}; it runs isolated from now on (remove its line from {} to run it in-process again)",
            crashed.key,
            crashed.what,
            isolated_list(home).display()
        );
        if !list.iter().any(|c| c.key == crashed.key) {
            list.push(crashed);
            added = true;
        }
        let _ = std::fs::remove_file(entry.path());
    }
    if added {
        let text: String = list
            .iter()
            .map(|c| format!("{}\t{}\n", c.key, c.what))
            .collect();
        let _ = crate::plugins::atomic::replace(&isolated_list(home), &text);
    }
    list
}

/// The home's isolated list as it is.
pub fn read_list(home: &Path) -> Vec<Crashed> {
    let Ok(text) = crate::plugins::atomic::read_regular(&isolated_list(home)) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|line| {
            let (key, what) = line.split_once('\t').unwrap_or((line, "a call"));
            let key = key.trim();
            (!key.is_empty()).then(|| Crashed {
                key: key.to_string(),
                what: what.to_string(),
            })
        })
        .collect()
}

/// The unfinished record of a journal, if there is one.
fn read_record(path: &Path) -> Option<Crashed> {
    let bytes = crate::plugins::atomic::read_regular(path).ok()?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = std::str::from_utf8(&bytes[..end]).ok()?;
    let (key, what) = text.split_once('\t')?;
    (!key.is_empty()).then(|| Crashed {
        key: key.to_string(),
        what: what.to_string(),
    })
}

/// Whether process `pid` still runs (a journal of a live plughost is not a crash).
fn process_lives(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; no memory is involved.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A journal opened on first use, so a home whose plugins are all bundled
/// or isolated gets no `crash-journal/` directory.
pub struct Lazy {
    home: PathBuf,
    journal: std::sync::OnceLock<Option<Journal>>,
}

impl Lazy {
    pub fn new(home: &Path) -> Lazy {
        Lazy {
            home: home.to_path_buf(),
            journal: std::sync::OnceLock::new(),
        }
    }

    /// Run `f` recorded as plugin `key` doing `what`: a crash inside it
    /// leaves the record behind for the next start.
    pub fn around<R>(&self, key: &str, what: &str, f: impl FnOnce() -> R) -> R {
        self.around_record(&Record::new(key, what), f)
    }

    /// [`Lazy::around`] with a record made beforehand.
    pub fn around_record<R>(&self, record: &Record, f: impl FnOnce() -> R) -> R {
        let journal = self.journal.get_or_init(|| Journal::open(&self.home));
        if let Some(j) = journal {
            j.enter_record(record);
        }
        let r = f();
        if let Some(j) = journal {
            j.leave();
        }
        r
    }

    /// A call recorded by [`Lazy::around`] was abandoned past its time
    /// limit and may never return: clear its record, so the process ending
    /// with it still blocked is not taken for a crash in it next start.
    pub fn abandoned(&self) {
        if let Some(Some(j)) = self.journal.get() {
            j.leave();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the journal costs a call (printed; `cargo test --lib journal --
    /// --nocapture`), and that a record left behind by a dead process is
    /// moved to the isolated list while a cleared one is not.
    /// A second journal of this process over the same home shares the file
    /// without truncating it (the first one's mapping stays backed), and
    /// a stale record in it reads as clear.
    #[test]
    fn a_second_journal_over_one_home_keeps_the_file_and_clears_a_stale_record() {
        let home = tempfile::tempdir().unwrap();
        let path = directory(home.path()).join(std::process::id().to_string());
        std::fs::create_dir_all(directory(home.path())).unwrap();
        std::fs::write(&path, b"stale\ttool 'old'\0").unwrap();
        let first = Journal::open(home.path()).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap()[0],
            0,
            "the stale record is cleared"
        );
        first.enter_record(&Record::new("p", "tool 'x'"));
        let second = Journal::open(home.path()).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), RECORD as u64);
        first.enter_record(&Record::new("p", "tool 'y'"));
        second.leave();
        first.leave();
    }

    /// What `enter` stores reads back from the file as `key<TAB>what` up
    /// to its NUL: a shorter record after a longer one, one cut to the
    /// record's size, and a cleared one.
    #[test]
    fn an_entered_record_reads_back_from_the_file() {
        let home = tempfile::tempdir().unwrap();
        let journal = Journal::open(home.path()).unwrap();
        let text = || {
            let bytes = std::fs::read(&journal.path).unwrap();
            let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
            String::from_utf8(bytes[..end].to_vec()).unwrap()
        };
        journal.enter_record(&Record::new(
            "a-plugin-with-a-long-key",
            "post_tool_call hook",
        ));
        assert_eq!(text(), "a-plugin-with-a-long-key\tpost_tool_call hook");
        journal.enter_record(&Record::new("p", "tool 'x'"));
        assert_eq!(text(), "p\ttool 'x'");
        let long = "w".repeat(2 * RECORD);
        journal.enter_record(&Record::new("k", &long));
        assert_eq!(text(), format!("k\t{}", &long[..RECORD - 3]));
        journal.leave();
        assert_eq!(text(), "");
    }

    #[test]
    fn a_record_left_by_a_dead_process_isolates_its_plugin() {
        let home = tempfile::tempdir().unwrap();
        let lazy = Lazy::new(home.path());
        let n = 20_000u32;
        let started = std::time::Instant::now();
        for _ in 0..n {
            lazy.around("p", "tool 'x'", || ());
        }
        let per_call = started.elapsed() / n;
        println!("crash journal: {per_call:?} per journaled call (stores into the mapped record)");
        // A journal of a process that is gone: pid 2^22+1 is above Linux's pid_max default.
        let dead = directory(home.path()).join("4194305");
        std::fs::write(&dead, b"plugin-a\ttool 'boom'\0\0\0").unwrap();
        let cleared = directory(home.path()).join("4194306");
        std::fs::write(&cleared, [0u8; RECORD]).unwrap();
        let list = quarantine(home.path());
        assert_eq!(
            list,
            vec![Crashed {
                key: "plugin-a".into(),
                what: "tool 'boom'".into()
            }]
        );
        assert!(!dead.exists() && !cleared.exists());
        assert_eq!(read_list(home.path()), list);
    }
}
