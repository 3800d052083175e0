//! The README and every page of docs/ run as written (the pages are listed
//! from the directory, so a new page is covered without a change here).
//!
//! Every `sh` block line runs (in order, one fresh home per document)
//! through the built binary: `plughost …` and `cargo run --release -- …`
//! both mean it (and `mkdir -p ~/… && cp -r examples/…`, copying an example
//! into the fresh home, and `python3 -c …`, such as the README's check of
//! the interpreter, run as they are). A line whose comment holds `(untested: …)` is skipped —
//! the README explains the marker — and any other line this test cannot
//! run fails it. A comment `# → TEXT` is the output: stdout must end with
//! TEXT, and `(exit N)` after it is the exit code (else 0). A `console`
//! block's `$ command` lines run too and their output (stderr and stdout
//! together; lines of concurrent tool calls in any order) must be the lines
//! shown. A code block whose first line is `# examples/…` must be that
//! file, byte for byte. Python blocks are tests/python/test_readme.py's.
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fenced block: its info string, its lines, the line it starts on.
struct Block {
    lang: String,
    lines: Vec<String>,
    at: usize,
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    for (n, line) in markdown.lines().enumerate() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) => {
                current = Some(Block {
                    lang: info.trim().to_string(),
                    lines: Vec::new(),
                    at: n + 1,
                })
            }
            (Some(_), Some("")) => out.extend(current.take()),
            (Some(block), _) => block.lines.push(line.to_string()),
            (None, None) => {}
        }
    }
    assert!(current.is_none(), "an unclosed code block");
    out
}

/// `command  # comment` → (command, comment). A `#` inside quotes is
/// part of the command.
fn split_comment(line: &str) -> (&str, &str) {
    let (mut single, mut double) = (false, false);
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && (i == 0 || line[..i].ends_with(' ')) => {
                return (line[..i].trim(), line[i + 1..].trim());
            }
            _ => {}
        }
    }
    (line.trim(), "")
}

struct Runner {
    home: tempfile::TempDir,
    bin_dir: tempfile::TempDir,
}

impl Runner {
    fn new() -> Runner {
        let bin_dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_plughost"),
            bin_dir.path().join("plughost"),
        )
        .unwrap();
        Runner {
            home: tempfile::tempdir().unwrap(),
            bin_dir,
        }
    }

    /// Run a command line as the README means it; (stdout, stderr, code).
    fn run(&self, line: &str, merge: bool) -> (String, String, i32) {
        let command = line.replacen("cargo run --release --", "plughost", 1);
        // Besides plughost itself, only copying files into the fresh home.
        let setup = command.starts_with("mkdir -p ~/") && command.contains(" && cp -r examples/");
        let python = command.starts_with("python3 -c ");
        assert!(
            command.starts_with("plughost ") || setup || python,
            "`{line}` cannot be run by this test: mark it (untested: why)"
        );
        let path = format!(
            "{}:{}",
            self.bin_dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let script = if merge {
            format!("{command} 2>&1")
        } else {
            command
        };
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(root())
            .env("PATH", path)
            .env("PLUGHOST_HOME", self.home.path().join(".plughost"))
            .env("HOME", self.home.path())
            .env_remove("HERMES_HOME")
            .env_remove("PLUGHOST_LOG")
            .env_remove("PLUGHOST_BUNDLED_DIR")
            .env_remove("PLUGHOST_ENABLE_PROJECT_PLUGINS")
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        // Paths as the README writes them.
        let home = self.home.path().join(".plughost").display().to_string();
        let text = |b: &[u8]| String::from_utf8_lossy(b).replace(&home, "~/.plughost");
        (
            text(&out.stdout),
            text(&out.stderr),
            out.status.code().unwrap_or(-1),
        )
    }
}

/// Run every block of the document at `relative`; how many commands ran.
fn check_document(relative: &str) -> usize {
    let path = root().join(relative);
    let markdown = std::fs::read_to_string(&path).unwrap();
    let runner = Runner::new();
    let mut ran = 0;
    for block in blocks(&markdown) {
        let where_ = format!("{relative}:{}", block.at);
        if let Some(file) = block
            .lines
            .first()
            .and_then(|l| l.strip_prefix("# examples/"))
        {
            let expected = std::fs::read_to_string(root().join("examples").join(file)).unwrap();
            let shown = block.lines[1..].join("\n") + "\n";
            assert_eq!(
                shown, expected,
                "{where_}: the block differs from examples/{file}"
            );
            continue;
        }
        match block.lang.as_str() {
            "sh" => {
                for line in &block.lines {
                    let (command, comment) = split_comment(line);
                    if command.is_empty()
                        || comment.starts_with("(untested:")
                        || comment.contains("(untested:")
                    {
                        continue;
                    }
                    let (stdout, stderr, code) = runner.run(command, false);
                    ran += 1;
                    let (expected, exit) = match comment.strip_prefix('→') {
                        Some(shown) => match shown.trim().rsplit_once(" (exit ") {
                            Some((text, n)) => {
                                (Some(text.trim()), n.trim_end_matches(')').parse().unwrap())
                            }
                            None => (Some(shown.trim()), 0),
                        },
                        None => (None, 0),
                    };
                    assert_eq!(
                        code, exit,
                        "{where_}: `{command}` exited {code}\nstdout: {stdout}\nstderr: {stderr}"
                    );
                    if let Some(expected) = expected {
                        assert!(
                            stdout.trim_end().ends_with(expected),
                            "{where_}: `{command}` printed {stdout:?}, the document shows {expected:?}"
                        );
                    }
                }
            }
            "console" => {
                let mut lines = block.lines.iter().peekable();
                while let Some(line) = lines.next() {
                    let command = line
                        .strip_prefix("$ ")
                        .unwrap_or_else(|| panic!("{where_}: output without a `$ command`"));
                    let mut shown: Vec<&str> = Vec::new();
                    while let Some(next) = lines.peek().filter(|l| !l.starts_with("$ ")) {
                        shown.push(next);
                        lines.next();
                    }
                    let (output, _, code) = runner.run(command, true);
                    ran += 1;
                    assert_eq!(code, 0, "{where_}: `{command}`: {output}");
                    let mut got: Vec<&str> = output.lines().collect();
                    got.sort();
                    shown.sort();
                    assert_eq!(got, shown, "{where_}: `{command}` printed\n{output}");
                }
            }
            _ => {}
        }
    }
    ran
}

/// Every `docs/*.md`, relative to the repository, sorted.
fn docs_pages() -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    pages
}

/// A panic's message.
fn message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(a panic without a message)".into())
}

#[test]
fn readme_blocks_run_as_written() {
    assert!(check_document("README.md") > 0, "README.md: no command ran");
}

/// Each page in a thread of its own (the pages are independent: each has
/// its own fresh home), every failure reported, not only the first.
#[test]
fn docs_pages_blocks_run_as_written() {
    let pages = docs_pages();
    let results: Vec<(String, Result<usize, String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = pages
            .iter()
            .map(|page| (page, scope.spawn(move || check_document(page))))
            .collect();
        handles
            .into_iter()
            .map(|(page, handle)| (page.clone(), handle.join().map_err(message)))
            .collect()
    });
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(page, result)| result.as_ref().err().map(|e| format!("{page}: {e}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The plugin author's guides install and drive their example plugins:
    // a guide from which no command ran was not checked at all.
    for guide in ["flowly", "hermes", "felix", "codumentor"] {
        let page = format!("docs/{guide}.md");
        let ran = results
            .iter()
            .find(|(p, _)| *p == page)
            .map(|(_, r)| r.clone());
        assert!(
            matches!(ran, Some(Ok(n)) if n > 0),
            "{page}: no command ran ({ran:?})"
        );
    }
}

#[test]
fn comments_split_outside_quotes_only() {
    assert_eq!(split_comment("a '#x' # c"), ("a '#x'", "c"));
    assert_eq!(split_comment("a"), ("a", ""));
    let _ = PathBuf::new();
}
