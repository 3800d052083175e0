//! What a plugin directory's own files show of the Hermes plugin API, for
//! a plugin placed or installed without `--dialect`: its manifest's
//! Hermes-only fields, and any module of its package importing a Hermes
//! module, calling a registration only Hermes's `PluginContext` has, calling
//! `register_tool` with Hermes's four positional arguments
//! (`name, toolset, schema, handler`), defining a handler the Hermes way
//! (`def handler(args, **kwargs)` or `def handler(args, task_id=None)`:
//! the signature read decides, and is named), or reading Hermes's home (`~/.hermes`,
//! `HERMES_HOME`), or registering a hook as only Hermes can fire or call it
//! (an event only Hermes has, a callback taking keywords only, a
//! `pre_gateway_dispatch` callback taking Hermes's `gateway`/`session_store`).
//! The first sign found is the reason given, so the choice
//! is never silent.

use std::path::{Path, PathBuf};

/// Manifest fields Hermes reads and Flowly does not (spec: hermes-plugin-api.md, "Manifest").
const MANIFEST_FIELDS: &[&str] = &[
    "requires_hermes",
    "pip_dependencies",
    "python_dependencies",
    "platforms",
    "api_version",
    "requires_plugins",
    "config_schema",
    "external_dependencies",
    "provides_browser_providers",
    "capabilities",
    "optional_env",
    "hooks",
];

/// `kind` values only Hermes has.
const KINDS: &[&str] = &["platform", "model-provider"];

/// Modules only a Hermes plugin imports (Hermes's own packages).
const MODULES: &[&str] = &[
    "hermes_constants",
    "hermes_cli",
    "hermes_plugins",
    "tools.registry",
    "tools.approval",
    "tools.mcp_tool",
    "tools.env_passthrough",
    "plugin_runtime",
    "gateway",
    "agent.plugin_llm",
    // Hermes's provider base classes (a provider plugin imports its own).
    "agent.image_gen_provider",
    "agent.video_gen_provider",
    "agent.tts_provider",
    "agent.transcription_provider",
    "agent.web_search_provider",
    "agent.memory_provider",
    "agent.memory_manager",
    "providers.base",
    "hermes_state",
    "tools.xai_http",
];

/// `PluginContext` members only Hermes's context has.
const METHODS: &[&str] = &[
    "register_cli_command",
    "register_platform",
    "register_middleware",
    "register_context_engine",
    "register_memory_provider",
    "register_slack_action_handler",
    "register_auxiliary_task",
    "register_system_prompt_section",
    "register_approval_transport",
    "inject_message",
    "dispatch_tool",
    "spawn_task",
    "on_unload",
];

/// Files read per plugin, and bytes per file: a sniff, not an audit.
const MAX_FILES: usize = 64;
const MAX_BYTES: usize = 256 * 1024;

/// Why the plugin in `dir` is a Hermes plugin, when its files say so.
pub fn evidence(dir: &Path) -> Option<String> {
    if let Some(why) = manifest_evidence(dir) {
        return Some(why);
    }
    for file in python_files(dir) {
        let Some(text) = read_bounded(&file) else {
            continue;
        };
        let rel = file
            .strip_prefix(dir)
            .unwrap_or(&file)
            .display()
            .to_string();
        if let Some(why) = source_evidence(&text) {
            return Some(format!("{rel} {why}"));
        }
    }
    None
}

fn read_bounded(path: &Path) -> Option<String> {
    // Through the build's view (discovery and the load read these too); a
    // file over the bound is read only up to it.
    let bytes = crate::plugins::snapshot::read_head(path, MAX_BYTES).ok()?;
    let head = &bytes[..bytes.len().min(MAX_BYTES)];
    match std::str::from_utf8(head) {
        Ok(text) => Some(text.to_owned()),
        // A character cut at the bound: the whole ones before it.
        Err(e) if e.error_len().is_none() => {
            Some(String::from_utf8_lossy(&head[..e.valid_up_to()]).into_owned())
        }
        Err(_) => None,
    }
}

fn manifest_evidence(dir: &Path) -> Option<String> {
    let (name, text) = ["plugin.yaml", "plugin.yml"]
        .iter()
        .find_map(|n| read_bounded(&dir.join(n)).map(|t| (*n, t)))?;
    // Most manifests name none of the keys looked at: no parse for them.
    let named = |key: &str| text.contains(key);
    if !MANIFEST_FIELDS.iter().any(|f| named(f)) && !named("manifest_version") && !named("kind") {
        return None;
    }
    let doc: serde_json::Value = serde_saphyr::from_str(&text).ok()?;
    let map = doc.as_object()?;
    for field in MANIFEST_FIELDS {
        if map.contains_key(*field) {
            return Some(format!("its {name} has `{field}`, a Hermes manifest field"));
        }
    }
    // Flowly's manifests carry `manifest_version: 1` too; only Hermes reads 2.
    let version = map
        .get("manifest_version")
        .and_then(serde_json::Value::as_u64);
    if version.is_some_and(|v| v >= 2) {
        return Some(format!(
            "its {name} has `manifest_version: {}`, which only Hermes reads",
            version.unwrap_or_default()
        ));
    }
    let kind = map.get("kind").and_then(serde_json::Value::as_str)?;
    KINDS
        .contains(&kind)
        .then(|| format!("its {name} has `kind: {kind}`, a Hermes plugin kind"))
}

/// What the package's Python sources (not its manifest) show of Hermes:
/// a `manifest_version` above plughost's is read as Hermes's only when
/// its code is Hermes's too.
pub fn code_evidence(dir: &Path) -> Option<String> {
    python_files(dir)
        .iter()
        .find_map(|file| read_bounded(file).and_then(|text| source_evidence(&text)))
}

/// The package's Python files, `__init__.py` first, at most [`MAX_FILES`],
/// `__pycache__` and hidden directories skipped.
fn python_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.join("__init__.py")];
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((at, depth)) = stack.pop() {
        let Ok(entries) = crate::plugins::snapshot::entries(&at) else {
            continue;
        };
        for entry in entries.iter() {
            let name = entry.name.to_str().unwrap_or("");
            if name.starts_with('.') || name == "__pycache__" {
                continue;
            }
            // Symbolic links are not followed (their own type is neither).
            let path = at.join(&entry.name);
            if entry.file_type.is_dir() && depth < 3 {
                stack.push((path, depth + 1));
            } else if entry.file_type.is_file() && name.ends_with(".py") && !out.contains(&path) {
                out.push(path);
            }
            if out.len() >= MAX_FILES {
                return out;
            }
        }
    }
    out
}

/// What one module's source shows, as the end of a sentence.
fn source_evidence(text: &str) -> Option<String> {
    for line in text.lines().map(str::trim_start) {
        if line.starts_with('#') {
            continue;
        }
        if let Some(module) = imported_hermes_module(line) {
            return Some(format!("imports {module}, a Hermes module"));
        }
    }
    let code = without_comments(text);
    if let Some(method) = first_called(&code) {
        return Some(format!(
            "calls ctx.{method}(), which only Hermes's PluginContext has"
        ));
    }
    if register_tool_positional(&code).is_some_and(|n| n >= 4) {
        return Some(
            "calls register_tool with four positional arguments (name, toolset, schema, handler), Hermes's signature".into(),
        );
    }
    if let Some(why) = hook_evidence(&code) {
        return Some(why);
    }
    if let Some(signature) = hermes_handler(&code) {
        return Some(format!(
            "defines a tool handler the Hermes way, `def {signature}` (Hermes calls handler(args, task_id=…); a Flowly handler takes its arguments by name)"
        ));
    }
    if reads_hermes_home(&code) {
        return Some("reads Hermes's home (`~/.hermes` or `HERMES_HOME`)".into());
    }
    None
}

/// What the first telling `register_hook(event, callback)` call shows: an
/// event only Hermes fires, or a callback only Hermes's calling convention
/// (`cb(**kwargs)`) can call — one that takes no positional argument
/// (`def cb(*, …)`, `def cb(**kw)`, `lambda **kw: …`), or a
/// `pre_gateway_dispatch` callback taking Hermes's `gateway` or
/// `session_store`. Flowly calls every callback with one context, by position.
fn hook_evidence(code: &str) -> Option<String> {
    code.match_indices("register_hook(").find_map(|(at, m)| {
        let args = parameters(&code[at + m.len()..])?;
        let event = args.first()?.trim_matches(['"', '\'']);
        if super::valid_hooks::VALID_HOOKS.contains(&event)
            && crate::dialects::flowly::lanes::by_name(event).is_none()
        {
            return Some(format!(
                "registers the hook `{event}`, which only Hermes fires"
            ));
        }
        let callback = args.get(1)?;
        if let Some(params) = callback.strip_prefix("lambda") {
            let params = params.split(':').next().unwrap_or("").trim();
            return (params == "*" || params.starts_with("*,") || params.starts_with("**"))
                .then(|| format!("registers a hook callback `lambda {params}: …` that takes no positional argument, which only Hermes's keyword calling convention can call (Flowly passes one context by position)"));
        }
        let name = callback.rsplit('.').next().unwrap_or(callback).trim();
        let params = def_parameters(code, name)?;
        let first = params.first()?;
        if first == "*" || first.starts_with("**") {
            return Some(format!(
                "registers a hook callback `def {name}({})` that takes no positional argument, which only Hermes's keyword calling convention can call (Flowly passes one context by position)",
                params.join(", ")
            ));
        }
        let named = |p: &String| p.split([':', '=']).next().unwrap_or("").trim().to_string();
        let hermes_kw = params
            .iter()
            .any(|p| ["gateway", "session_store"].contains(&named(p).as_str()));
        (event == "pre_gateway_dispatch" && hermes_kw).then(|| {
            format!(
                "registers a pre_gateway_dispatch callback `def {name}({})` taking Hermes's keyword arguments (`gateway`, `session_store`); Flowly passes one context by position",
                params.join(", ")
            )
        })
    })
}

/// The parameters of the first `def name(` in `code` (`self`/`cls` dropped).
fn def_parameters(code: &str, name: &str) -> Option<Vec<String>> {
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let head = format!("def {name}(");
    let at = code.match_indices(&head).find_map(|(at, _)| {
        let clean = at == 0 || code[..at].ends_with(|c: char| c.is_whitespace() || c == ':');
        clean.then_some(at)
    })?;
    let mut params = parameters(&code[at + head.len()..])?;
    if params.first().is_some_and(|p| p == "self" || p == "cls") {
        params.remove(0);
    }
    Some(params)
}

/// A string literal naming Hermes's home directory or its variable.
fn reads_hermes_home(code: &str) -> bool {
    const LITERALS: &[&str] = &[
        "\"HERMES_HOME\"",
        "'HERMES_HOME'",
        "\"~/.hermes",
        "'~/.hermes",
        "\".hermes\"",
        "'.hermes'",
    ];
    LITERALS.iter().any(|l| code.contains(l))
}

fn imported_hermes_module(line: &str) -> Option<&'static str> {
    let rest = line
        .strip_prefix("import ")
        .or_else(|| line.strip_prefix("from "))?
        .trim_start();
    MODULES.iter().copied().find(|m| {
        rest.strip_prefix(m)
            .is_some_and(|after| after.is_empty() || after.starts_with([' ', '.', ',']))
    })
}

fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first of [`METHODS`] (in their order) called on anything
/// (`ctx.inject_message(`), in one pass over the code: each `.name(`.
fn first_called(code: &str) -> Option<&'static str> {
    let mut first: Option<usize> = None;
    for (at, _) in code.match_indices('.') {
        let rest = &code[at + 1..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let Some(index) = METHODS.iter().position(|m| *m == &rest[..end]) else {
            continue;
        };
        if rest[end..].trim_start().starts_with('(') && first.is_none_or(|f| index < f) {
            first = Some(index);
        }
    }
    first.map(|i| METHODS[i])
}

/// The most top-level positional arguments of any `register_tool(` call.
fn register_tool_positional(code: &str) -> Option<usize> {
    code.match_indices("register_tool(")
        .filter_map(|(at, m)| positional_args(&code[at + m.len()..]))
        .max()
}

/// How many top-level positional arguments the call whose argument text
/// starts `rest` has (`None` when its parenthesis never closes).
fn positional_args(rest: &str) -> Option<usize> {
    let args = parameters(rest)?;
    Some(
        args.iter()
            .filter(|a| !is_keyword(a) && !a.starts_with('*'))
            .count(),
    )
}

/// `name=value` (not `a == b`).
fn is_keyword(arg: &str) -> bool {
    let Some((name, value)) = arg.split_once('=') else {
        return false;
    };
    !value.starts_with('=')
        && !name.ends_with(['!', '<', '>'])
        && name.trim().chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// The first `def` with a Hermes tool handler's signature, as written
/// (`handle(args, **kwargs)`, `handle(args, task_id=None)`): the arguments
/// dict first (`args`, annotated or not; `self` of a method skipped), then
/// only keyword extras, `**kwargs` or Hermes's `task_id`. Hermes calls
/// `handler(args, task_id=…)`; a Flowly handler takes its arguments by name.
fn hermes_handler(code: &str) -> Option<String> {
    code.match_indices("def ").find_map(|(at, _)| {
        if at > 0 && !code[..at].ends_with(|c: char| c.is_whitespace() || c == ':') {
            return None; // `undef `, `_def ` …
        }
        let rest = &code[at + 4..];
        let open = rest.find('(')?;
        let name = rest[..open].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let params = parameters(&rest[open + 1..])?;
        let mut params: Vec<&str> = params.iter().map(String::as_str).collect();
        if params.first().is_some_and(|p| *p == "self" || *p == "cls") {
            params.remove(0);
        }
        let (first, extras) = params.split_first()?;
        let first_name = first.split([':', '=']).next().unwrap_or("").trim();
        if first_name != "args" || first.contains('=') || extras.is_empty() {
            return None;
        }
        let named = |p: &str| p.split([':', '=']).next().unwrap_or("").trim().to_string();
        let all_extras = extras
            .iter()
            .all(|p| p.starts_with("**") || *p == "*" || p.contains('='));
        let hermes_extra = extras
            .iter()
            .any(|p| p.starts_with("**") || named(p) == "task_id");
        (all_extras && hermes_extra).then(|| format!("{name}({})", params.join(", ")))
    })
}

/// The parameters of a `def` (or the arguments of a call) whose text
/// after `(` is `rest`, each trimmed, split at top-level commas (`Dict[str, Any]` is one), up to the closing
/// parenthesis; `None` when it never closes.
fn parameters(rest: &str) -> Option<Vec<String>> {
    let (mut depth, mut out, mut current) = (0i32, Vec::new(), String::new());
    let mut quote: Option<char> = None;
    for c in rest.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '(' | '[' | '{' => depth += 1,
                ')' if depth == 0 => {
                    out.push(std::mem::take(&mut current));
                    return Some(
                        out.iter()
                            .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
                            .filter(|p| !p.is_empty())
                            .collect(),
                    );
                }
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            },
        }
        current.push(c);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    fn why(files: &[(&str, &str)]) -> Option<String> {
        evidence(plugin(files).path())
    }

    #[test]
    fn each_kind_of_sign_is_named() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("plugin.yaml", "name: a\nrequires_hermes: '>=0.9'\n")], "`requires_hermes`"),
            (&[("plugin.yaml", "name: a\nkind: platform\n")], "`kind: platform`"),
            (&[("plugin.yaml", "name: a\nmanifest_version: 2\n")], "`manifest_version: 2`"),
            (&[("__init__.py", "from hermes_constants import get_hermes_home\n")], "imports hermes_constants"),
            (&[("__init__.py", "from .tools import register\n"), ("tools/impl.py", "from tools.registry import registry\n")], "tools/impl.py imports tools.registry"),
            (&[("__init__.py", "def register(ctx):\n    ctx.register_cli_command('x', 'help', setup)\n")], "ctx.register_cli_command()"),
            (&[("__init__.py", "def register(ctx):\n    ctx.register_tool('scan', 'security', SCHEMA, handle)\n")], "four positional arguments"),
            (&[("__init__.py", "def handle(args, **kwargs):\n    return '{}'\n")], "`def handle(args, **kwargs)`"),
            (&[("__init__.py", "def lookup(args, task_id=None):\n    return '{}'\n")], "`def lookup(args, task_id=None)`"),
            (&[("__init__.py", "class T:\n    def run(self, args: Dict[str, Any], task_id: Optional[str] = None) -> str:\n        return '{}'\n")], "`def run(args: Dict[str, Any], task_id: Optional[str] = None)`"),
            (&[("plugin.yaml", "name: a\nversion: 1.0.0\nhooks:\n  - pre_llm_call\n")], "has `hooks`, a Hermes manifest field"),
            (&[("__init__.py", "def on_llm(*, session_id='', **_):\n    pass\n\ndef register(ctx):\n    ctx.register_hook('pre_llm_call', on_llm)\n")], "`def on_llm(*, session_id='', **_)` that takes no positional argument"),
            (&[("__init__.py", "class P:\n    def seen(self, **kw):\n        pass\n    def register(self, ctx):\n        ctx.register_hook(\"post_tool_call\", self.seen)\n")], "`def seen(**kw)` that takes no positional argument"),
            (&[("__init__.py", "def register(ctx):\n    ctx.register_hook('pre_tool_call', lambda **kw: None)\n")], "`lambda **kw: …`"),
            (&[("__init__.py", "def gate(event=None, gateway=None, session_store=None, **kwargs):\n    pass\n\ndef register(ctx):\n    ctx.register_hook('pre_gateway_dispatch', gate)\n")], "pre_gateway_dispatch callback `def gate(event=None"),
            (&[("__init__.py", "def register(ctx):\n    ctx.register_hook('on_stream_delta', lambda ctx: None)\n")], "the hook `on_stream_delta`, which only Hermes fires"),
            (&[("__init__.py", "CONFIG = Path.home() / \".hermes\" / \"config.yaml\"\n")], "Hermes's home"),
            (&[("__init__.py", "from .store import x\n"), ("store.py", "home = os.getenv('HERMES_HOME')\n")], "store.py reads Hermes's home"),
        ];
        for (files, expected) in cases {
            let got = why(files).unwrap_or_default();
            assert!(got.contains(expected), "{files:?}: {got}");
        }
    }

    #[test]
    fn flowly_plugins_and_comments_show_nothing() {
        for files in [
            &[("__init__.py", "from flowly.plugins import PluginContext\n\ndef register(ctx):\n    ctx.register_tool('greet', SCHEMA, greet, description='Hi')\n    ctx.register_tool(name='x', schema={'a': (1, 2)}, handler=h, toolset='t')\n")][..],
            &[("__init__.py", "# from hermes_constants import x\n# ctx.inject_message('hi')\nimport hermes_constantsx\n")][..],
            &[("plugin.yaml", "name: a\nmanifest_version: 1\nkind: backend\nprovides_web_providers: [x]\n"), ("__init__.py", "def greet(name: str, **kw):\n    pass\n")][..],
            &[("__init__.py", "def search(args, limit=10):\n    pass\ndef only(args):\n    pass\ndef two(args, query):\n    pass\n")][..],
            &[("__init__.py", "def seen(ctx):\n    pass\ndef gate(ctx, *, extra=None):\n    pass\ndef register(ctx):\n    ctx.register_hook('post_tool_call', seen)\n    ctx.register_hook('pre_gateway_dispatch', gate)\n    ctx.register_hook('pre_llm_call', lambda c: None)\n")][..],
        ] {
            assert_eq!(why(files), None, "{files:?}");
        }
    }

    #[test]
    fn positional_arguments_are_counted_at_the_top_level() {
        assert_eq!(positional_args("a, b, c)"), Some(3));
        assert_eq!(
            positional_args("'n', 't', {'x': f(1, 2)}, h, check_fn=c)"),
            Some(4)
        );
        assert_eq!(positional_args("'a,b', x == y, *rest)"), Some(2));
        assert_eq!(positional_args("never closed"), None);
    }
}
