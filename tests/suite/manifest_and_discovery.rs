//! Manifests, discovery, enablement and config.json — no Python involved.

use std::path::PathBuf;

use crate::common::write_plugin;
use plughost::dialects::formats;
use plughost::plugins::config::{self, PluginLists};
use plughost::plugins::discovery::{discover, Source};
use plughost::plugins::manifest::{self, ManifestError, PluginKind};

#[test]
fn manifest_probe_order_is_yaml_then_yml_then_json() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("plugin.json"), r#"{"name": "from-json"}"#).unwrap();
    assert_eq!(manifest::load(&p).unwrap().name, "from-json");
    std::fs::write(p.join("plugin.yml"), "name: from-yml\n").unwrap();
    assert_eq!(manifest::load(&p).unwrap().name, "from-yml");
    std::fs::write(p.join("plugin.yaml"), "name: from-yaml\n").unwrap();
    assert_eq!(manifest::load(&p).unwrap().name, "from-yaml");
}

#[test]
fn manifest_fields_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_plugin(dir.path(), "dirname", "version: 2\n", &[]);
    let m = manifest::load(&p).unwrap();
    assert_eq!(m.name, "dirname");
    assert_eq!(m.version, "2");
    assert_eq!(m.kind, PluginKind::Standalone);
    assert_eq!(m.manifest_version, 1);

    let p = write_plugin(
        dir.path(),
        "full",
        "name: full-plugin\nversion: 1.2.3\nmanifest_version: 1\ndescription: Does things\nauthor: me@example.com\nkind: standalone\nrequires_env:\n  - API_KEY\n  - name: OTHER\n    description: other one\nprovides_tools: [a, b]\nprovides_hooks:\n  - post_tool_call\n",
        &[],
    );
    let m = manifest::load(&p).unwrap();
    assert_eq!(m.name, "full-plugin");
    assert_eq!(m.version, "1.2.3");
    assert_eq!(m.description, "Does things");
    assert_eq!(m.author, "me@example.com");
    assert_eq!(
        m.requires_env
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["API_KEY", "OTHER"]
    );
    assert_eq!(m.provides_tools, ["a", "b"]);
    assert_eq!(m.provides_hooks, ["post_tool_call"]);
}

#[test]
fn manifest_refusals_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let too_new = write_plugin(dir.path(), "new", "manifest_version: 2\n", &[]);
    let err = manifest::load(&too_new).unwrap_err();
    assert!(matches!(err, ManifestError::TooNew { found: 2 }));
    assert!(err.to_string().contains("manifest_version 2"), "{err}");

    let malformed = write_plugin(dir.path(), "bad", "name: [unclosed\n", &[]);
    let err = manifest::load(&malformed).unwrap_err();
    assert!(
        err.to_string().starts_with("malformed plugin.yaml"),
        "{err}"
    );

    let list_root = write_plugin(dir.path(), "list", "- a\n- b\n", &[]);
    let err = manifest::load(&list_root).unwrap_err();
    assert!(err.to_string().contains("must be a mapping"), "{err}");

    let json_dir = dir.path().join("json");
    std::fs::create_dir_all(&json_dir).unwrap();
    std::fs::write(json_dir.join("plugin.json"), "{not json").unwrap();
    assert!(manifest::load(&json_dir)
        .unwrap_err()
        .to_string()
        .starts_with("malformed plugin.json"));
}

#[test]
fn unknown_kind_is_standalone_and_other_kinds_parse() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest::load(&write_plugin(dir.path(), "k", "kind: wizard\n", &[])).unwrap();
    assert_eq!(m.kind, PluginKind::Standalone);
    assert_eq!(m.warnings.len(), 1);
    let m = manifest::load(&write_plugin(dir.path(), "b", "kind: backend\n", &[])).unwrap();
    assert_eq!(m.kind, PluginKind::Backend);
    let m = manifest::load(&write_plugin(dir.path(), "e", "kind: exclusive\n", &[])).unwrap();
    assert_eq!(m.kind, PluginKind::Exclusive);
}

fn roots(
    bundled: &std::path::Path,
    user: &std::path::Path,
    project: Option<&std::path::Path>,
) -> Vec<(Source, PathBuf)> {
    let mut r = vec![
        (Source::Bundled, bundled.to_path_buf()),
        (Source::User, user.to_path_buf()),
    ];
    if let Some(p) = project {
        r.push((Source::Project, p.to_path_buf()));
    }
    r
}

#[test]
fn enablement_rules() {
    let dir = tempfile::tempdir().unwrap();
    let (b, u, p) = (
        dir.path().join("b"),
        dir.path().join("u"),
        dir.path().join("p"),
    );
    write_plugin(
        &b,
        "bundled-one",
        "name: bundled-one\n",
        &[("__init__.py", "")],
    );
    write_plugin(
        &b,
        "bundled-off",
        "name: bundled-off\n",
        &[("__init__.py", "")],
    );
    write_plugin(&u, "user-on", "name: user-on\n", &[("__init__.py", "")]);
    write_plugin(&u, "user-off", "name: user-off\n", &[("__init__.py", "")]);
    write_plugin(&p, "proj", "name: proj\n", &[("__init__.py", "")]);
    write_plugin(&u, ".hidden", "name: hidden\n", &[("__init__.py", "")]);
    write_plugin(
        &u,
        "nested/deeper",
        "name: deeper\n",
        &[("__init__.py", "")],
    );
    let lists = PluginLists {
        enabled: vec!["user-on".into(), "proj".into(), "bundled-off".into()],
        disabled: vec!["bundled-off".into()],
    };
    let found = discover(&roots(&b, &u, Some(&p)), &lists, formats());
    let get = |k: &str| {
        found
            .iter()
            .find(|c| c.key == k)
            .unwrap_or_else(|| panic!("{k} missing"))
    };
    assert!(get("bundled-one").enabled);
    assert!(!get("bundled-off").enabled, "disabled overrides everything");
    assert_eq!(
        get("bundled-off").skip_reason.as_deref(),
        Some("disabled in config")
    );
    assert!(get("user-on").enabled);
    assert!(!get("user-off").enabled);
    assert_eq!(
        get("user-off").skip_reason.as_deref(),
        Some("not in plugins.enabled (run: plughost plugins enable user-off)")
    );
    assert!(get("proj").enabled);
    assert_eq!(get("proj").source, Source::Project);
    assert!(
        found.iter().all(|c| c.key != "hidden" && c.key != "deeper"),
        "dot dirs and depth > 1 are skipped"
    );
}

#[test]
fn later_source_wins_on_key_collision() {
    let dir = tempfile::tempdir().unwrap();
    let (b, u, p) = (
        dir.path().join("b"),
        dir.path().join("u"),
        dir.path().join("p"),
    );
    write_plugin(
        &b,
        "same",
        "name: same\nversion: bundled\n",
        &[("__init__.py", "")],
    );
    write_plugin(
        &u,
        "same-user-dir",
        "name: same\nversion: user\n",
        &[("__init__.py", "")],
    );
    let lists = PluginLists {
        enabled: vec!["same".into()],
        disabled: vec![],
    };
    let found = discover(&roots(&b, &u, None), &lists, formats());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].source, Source::User);
    write_plugin(
        &p,
        "same",
        "name: same\nversion: project\n",
        &[("__init__.py", "")],
    );
    let found = discover(&roots(&b, &u, Some(&p)), &lists, formats());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].manifest.as_ref().unwrap().version, "project");
}

#[test]
fn skipped_kinds_and_bad_manifests_record_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path().join("b");
    write_plugin(&b, "be", "kind: backend\n", &[("__init__.py", "")]);
    write_plugin(&b, "ex", "kind: exclusive\n", &[("__init__.py", "")]);
    write_plugin(&b, "v2", "manifest_version: 2\n", &[("__init__.py", "")]);
    write_plugin(&b, "noinit", "name: noinit\n", &[]);
    let found = discover(&[(Source::Bundled, b)], &PluginLists::default(), formats());
    let reason = |k: &str| {
        found
            .iter()
            .find(|c| c.key == k)
            .unwrap()
            .skip_reason
            .clone()
            .unwrap()
    };
    let backend = found.iter().find(|c| c.key == "be").unwrap();
    assert!(
        backend.enabled && backend.skip_reason.is_none(),
        "kind: backend loads like standalone: {backend:?}"
    );
    assert_eq!(reason("ex"), "kind=exclusive is not supported yet");
    assert!(reason("v2").contains("manifest_version 2"));
    assert!(reason("noinit").contains("no __init__.py"));
}

#[test]
fn config_edits_keep_other_keys_and_refuse_broken_files() {
    let home = tempfile::tempdir().unwrap();
    let path = config::config_path(home.path());
    std::fs::write(
        &path,
        r#"{"model": "x", "plugins": {"enabled": ["a"], "extra": 1}}"#,
    )
    .unwrap();
    config::enable_plugin(home.path(), "b").unwrap();
    config::disable_plugin(home.path(), "a").unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["model"], "x");
    assert_eq!(doc["plugins"]["extra"], 1);
    assert_eq!(doc["plugins"]["enabled"], serde_json::json!(["b"]));
    assert_eq!(doc["plugins"]["disabled"], serde_json::json!(["a"]));
    config::enable_plugin(home.path(), "a").unwrap();
    let lists = config::read_plugin_lists(home.path()).unwrap();
    assert_eq!(lists.enabled, ["b", "a"]);
    assert!(lists.disabled.is_empty());

    std::fs::write(&path, "{\"plugins\": [1,").unwrap();
    let err = config::enable_plugin(home.path(), "c").unwrap_err();
    assert!(err.to_string().contains("not valid JSON (line 1"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\"plugins\": [1,",
        "a broken config is never overwritten"
    );
}

#[test]
fn home_resolution_and_truthiness() {
    let explicit = PathBuf::from("/some/where");
    assert_eq!(config::resolve_home(Some(&explicit)), explicit);
    for yes in ["1", "true", "YES", "on"] {
        assert!(config::truthy(yes));
    }
    for no in ["0", "false", "", "off", "nope"] {
        assert!(!config::truthy(no));
    }
}

/// A bundled and a user plugin sharing the key `shared`.
fn shared_key_roots(dir: &std::path::Path) -> Vec<(Source, PathBuf)> {
    let (b, u) = (dir.join("b"), dir.join("u"));
    write_plugin(
        &b,
        "shared",
        "name: shared\nversion: bundled\n",
        &[("__init__.py", "")],
    );
    write_plugin(
        &u,
        "impostor",
        "name: shared\nversion: user\n",
        &[("__init__.py", "")],
    );
    vec![(Source::Bundled, b), (Source::User, u)]
}

#[test]
fn a_user_plugin_that_is_not_enabled_is_listed_beside_the_bundled_one_it_shares_a_key_with() {
    let dir = tempfile::tempdir().unwrap();
    let found = discover(
        &shared_key_roots(dir.path()),
        &PluginLists::default(),
        formats(),
    );
    assert_eq!(found.len(), 2, "{found:?}");
    let bundled = found.iter().find(|c| c.source == Source::Bundled).unwrap();
    let user = found.iter().find(|c| c.source == Source::User).unwrap();
    assert!(bundled.enabled && bundled.skip_reason.is_none());
    assert!(!user.enabled);
    assert_eq!(
        user.skip_reason.as_deref(),
        Some("not in plugins.enabled (run: plughost plugins enable shared); enabling it replaces the bundled plugin 'shared'")
    );
}

#[test]
fn an_enabled_user_plugin_replaces_the_bundled_one_and_disabling_the_key_disables_both() {
    let dir = tempfile::tempdir().unwrap();
    let roots = shared_key_roots(dir.path());
    let enabled = PluginLists {
        enabled: vec!["shared".into()],
        disabled: vec![],
    };
    let found = discover(&roots, &enabled, formats());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].source, Source::User);
    assert!(found[0].enabled);

    let disabled = PluginLists {
        enabled: vec!["shared".into()],
        disabled: vec!["shared".into()],
    };
    let found = discover(&roots, &disabled, formats());
    assert_eq!(found.len(), 1, "between two not enabled the later is kept");
    assert_eq!(found[0].source, Source::User);
    assert_eq!(found[0].skip_reason.as_deref(), Some("disabled in config"));
}

#[test]
fn missing_bundled_plugins_are_listed_and_only_enabled_unreplaced_ones_count() {
    use plughost::plugins::bundled::BundledUnavailable;
    use plughost::plugins::discovery::{discover_after, missing_bundled, still_missing};
    let dir = tempfile::tempdir().unwrap();
    let u = dir.path().join("u");
    write_plugin(&u, "mine", "name: guard\n", &[("__init__.py", "")]);
    let missing = BundledUnavailable {
        names: vec!["guard".into(), "cleanup".into(), "audit".into()],
        cache: dir.path().join("cache/bundled-x"),
        cache_error: "No space left on device".into(),
        fallback_error: "Read-only file system".into(),
    };
    let lists = PluginLists {
        enabled: vec!["guard".into()],
        disabled: vec!["audit".into()],
    };
    let found = discover_after(
        missing_bundled(&missing, &lists, formats()),
        &[(Source::User, u)],
        &lists,
        formats(),
    );
    let get = |k: &str| found.iter().find(|c| c.key == k).unwrap();
    assert_eq!(
        get("guard").source,
        Source::User,
        "an enabled user plugin stands in"
    );
    assert!(get("cleanup").missing && get("cleanup").enabled);
    let reason = get("cleanup").skip_reason.clone().unwrap();
    assert!(reason.contains("No space left on device"), "{reason}");
    assert!(reason.contains("Read-only file system"), "{reason}");
    assert_eq!(
        get("audit").skip_reason.as_deref(),
        Some("disabled in config")
    );
    let left = still_missing(missing.clone(), &found).unwrap();
    assert_eq!(left.names, ["cleanup"]);
    let message = left.to_string();
    assert!(
        message.contains("bundled plugins cleanup are missing"),
        "{message}"
    );

    let all_off = PluginLists {
        enabled: vec![],
        disabled: vec!["guard".into(), "cleanup".into(), "audit".into()],
    };
    let found = discover_after(
        missing_bundled(&missing, &all_off, formats()),
        &[],
        &all_off,
        formats(),
    );
    assert!(still_missing(missing, &found).is_none());
}

#[test]
fn wrong_typed_plugin_lists_are_refused_with_file_key_and_expectation() {
    let home = tempfile::tempdir().unwrap();
    let path = config::config_path(home.path());
    let cases = [
        (
            r#"{"plugins": {"enabled": "demo"}}"#,
            "`plugins.enabled` must be a list of plugin names such as [\"demo\"], found a string",
        ),
        (
            r#"{"plugins": {"disabled": 1}}"#,
            "`plugins.disabled` must be a list of plugin names such as [\"demo\"], found a number",
        ),
        (
            r#"{"plugins": {"enabled": ["a", true]}}"#,
            "`plugins.enabled[1]` must be a plugin name (a string), found a boolean",
        ),
        (r#"{"plugins": []}"#, "`plugins` must be an object"),
        (r#"{"plugins": null}"#, "`plugins` must be an object"),
    ];
    for (text, expected) in cases {
        std::fs::write(&path, text).unwrap();
        let read = config::read_plugin_lists(home.path()).unwrap_err();
        assert!(
            matches!(read, config::ConfigError::WrongType { .. }),
            "{read:?}"
        );
        let message = read.to_string();
        assert!(
            message.starts_with(&path.display().to_string()),
            "{message}"
        );
        assert!(message.contains(expected), "{message}");
        assert!(message.contains("left untouched"), "{message}");
        for edit in [config::enable_plugin, config::disable_plugin] {
            let e = edit(home.path(), "demo").unwrap_err();
            assert!(matches!(e, config::ConfigError::WrongType { .. }), "{e:?}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
    }
    // Other keys under `plugins` are the user's: kept, whatever their type.
    std::fs::write(&path, r#"{"plugins": {"enabled": [], "settings": 5}}"#).unwrap();
    config::enable_plugin(home.path(), "demo").unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["plugins"]["settings"], 5);
    assert_eq!(doc["plugins"]["enabled"], serde_json::json!(["demo"]));
}
