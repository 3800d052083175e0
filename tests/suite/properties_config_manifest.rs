//! Property tests (proptest) for the two documents a user or a plugin
//! author writes by hand: `config.json` and the plugin manifest. Arbitrary
//! input never panics (an error, never a crash); valid documents
//! round-trip.
use std::path::Path;

use plughost::plugins::config::{self, ConfigError, PluginLists};
use plughost::plugins::manifest::{self, PluginKind};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Any JSON value, a few levels deep, with keys that matter to the config
/// (`plugins`, `enabled`, `disabled`) common among the random ones.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    let key = prop_oneof![
        Just("plugins".to_string()),
        Just("enabled".to_string()),
        Just("disabled".to_string()),
        "[a-z]{1,8}",
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// What the config's plugin lists should be, from the rules stated in
/// config.rs: `plugins` absent or an object; `enabled`/`disabled` absent
/// or lists of strings. `None` when the document must be refused.
fn expected_lists(doc: &Value) -> Option<PluginLists> {
    let Value::Object(top) = doc else { return None };
    let Some(plugins) = top.get("plugins") else {
        return Some(PluginLists::default());
    };
    let Value::Object(plugins) = plugins else {
        return None;
    };
    let list = |key: &str| -> Option<Vec<String>> {
        match plugins.get(key) {
            None => Some(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect(),
            Some(_) => None,
        }
    };
    Some(PluginLists {
        enabled: list("enabled")?,
        disabled: list("disabled")?,
    })
}

fn config_path() -> &'static Path {
    Path::new("/home/someone/.plughost/config.json")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn config_text_of_any_kind_never_panics(text in "\\PC{0,200}") {
        let _ = config::parse_plugin_lists(&text, config_path());
    }

    #[test]
    fn config_bytes_near_json_never_panic(text in "[\\[\\]{}\":,0-9a-z \\\\.eE+-]{0,120}") {
        let _ = config::parse_plugin_lists(&text, config_path());
    }

    #[test]
    fn config_documents_are_accepted_exactly_when_well_typed(doc in json_value()) {
        let text = doc.to_string();
        let parsed = config::parse_plugin_lists(&text, config_path());
        match (expected_lists(&doc), parsed) {
            (Some(expected), Ok(lists)) => prop_assert_eq!(lists, expected),
            (None, Err(ConfigError::WrongType { path, key, .. })) => {
                prop_assert_eq!(path, config_path());
                prop_assert!(key.starts_with("plugins"), "{}", key);
            }
            (None, Err(ConfigError::NotAnObject { .. })) => prop_assert!(!doc.is_object()),
            (expected, got) => prop_assert!(false, "{doc}: expected {expected:?}, got {got:?}"),
        }
    }
}

proptest! {
    // Each case writes a file: fewer of them.
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn config_edits_round_trip_and_keep_other_keys(
        enabled in prop::collection::vec("\\PC{0,16}", 0..5),
        disabled in prop::collection::vec("\\PC{0,16}", 0..5),
        extra in prop::collection::vec(("[a-z]{1,8}", json_value()), 0..4),
        settings in json_value(),
    ) {
        let home = tempfile::tempdir().unwrap();
        let mut doc: Map<String, Value> = extra
            .into_iter()
            .filter(|(k, _)| k != "plugins")
            .collect();
        doc.insert("plugins".into(), json!({"settings": settings}));
        std::fs::write(config::config_path(home.path()), Value::Object(doc.clone()).to_string()).unwrap();
        let want = PluginLists { enabled: enabled.clone(), disabled: disabled.clone() };
        let written = config::update_plugin_lists(home.path(), |l| *l = want.clone()).unwrap();
        prop_assert_eq!(&written, &want);
        prop_assert_eq!(config::read_plugin_lists(home.path()).unwrap(), want);
        let after: Value = serde_json::from_str(
            &std::fs::read_to_string(config::config_path(home.path())).unwrap(),
        ).unwrap();
        for (k, v) in &doc {
            if k != "plugins" {
                prop_assert_eq!(&after[k], v);
            }
        }
        prop_assert_eq!(&after["plugins"]["settings"], &doc["plugins"]["settings"]);
    }
}

/// The fields of a manifest a plugin author writes.
#[derive(Debug, Clone)]
struct Written {
    name: String,
    version: String,
    description: String,
    author: String,
    kind: PluginKind,
    requires_env: Vec<(String, String)>,
    provides_tools: Vec<String>,
    provides_hooks: Vec<String>,
}

impl Written {
    fn document(&self) -> Value {
        json!({
            "name": self.name,
            "version": self.version,
            "manifest_version": 1,
            "description": self.description,
            "author": self.author,
            "kind": self.kind.as_str(),
            "requires_env": self.requires_env.iter()
                .map(|(n, d)| json!({"name": n, "description": d}))
                .collect::<Vec<_>>(),
            "provides_tools": self.provides_tools,
            "provides_hooks": self.provides_hooks,
        })
    }
}

fn written() -> impl Strategy<Value = Written> {
    let kind = prop_oneof![
        Just(PluginKind::Standalone),
        Just(PluginKind::Backend),
        Just(PluginKind::Exclusive),
    ];
    (
        "[a-z][a-z0-9_-]{0,20}",
        "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}(-[a-z0-9.]{1,6})?",
        "\\PC{0,60}",
        "\\PC{0,30}",
        kind,
        prop::collection::vec(("[A-Z][A-Z0-9_]{0,12}", "\\PC{0,30}"), 0..4),
        prop::collection::vec("[a-z_][a-z0-9_]{0,15}", 0..4),
        prop::collection::vec("[a-z_]{1,20}", 0..4),
    )
        .prop_map(
            |(name, version, description, author, kind, requires_env, tools, hooks)| Written {
                name,
                version,
                description,
                author,
                kind,
                requires_env,
                provides_tools: tools,
                provides_hooks: hooks,
            },
        )
}

fn assert_same(m: &manifest::Manifest, w: &Written) -> Result<(), TestCaseError> {
    prop_assert_eq!(&m.name, &w.name);
    prop_assert_eq!(&m.version, &w.version);
    prop_assert_eq!(m.manifest_version, 1);
    prop_assert_eq!(&m.description, &w.description);
    prop_assert_eq!(&m.author, &w.author);
    prop_assert_eq!(m.kind, w.kind);
    let env: Vec<(String, String)> = m
        .requires_env
        .iter()
        .map(|r| (r.name.clone(), r.description.clone()))
        .collect();
    prop_assert_eq!(&env, &w.requires_env);
    prop_assert_eq!(&m.provides_tools, &w.provides_tools);
    prop_assert_eq!(&m.provides_hooks, &w.provides_hooks);
    prop_assert!(m.warnings.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn manifest_text_of_any_kind_never_panics(text in "\\PC{0,200}") {
        for file in manifest::MANIFEST_FILES {
            let _ = manifest::parse(&text, Path::new(file), "dir");
        }
    }

    #[test]
    fn manifest_yaml_shaped_text_never_panics(
        text in "([a-z_]{1,16}: ?[\\[\\]{}&*!|>'\"#:,a-z0-9 -]{0,24}\n( {2}- [a-z0-9&*:{}\\[\\]]{0,10}\n){0,3}){0,8}"
    ) {
        let _ = manifest::parse(&text, Path::new("plugin.yaml"), "dir");
    }

    #[test]
    fn manifest_values_of_any_type_are_refused_or_accepted_never_a_crash(doc in json_value()) {
        let _ = manifest::parse(&doc.to_string(), Path::new("plugin.json"), "dir");
        let yaml = serde_saphyr::to_string(&doc).unwrap();
        let _ = manifest::parse(&yaml, Path::new("plugin.yaml"), "dir");
    }

    #[test]
    fn valid_manifests_round_trip_through_yaml_and_json(w in written()) {
        let doc = w.document();
        let json_text = serde_json::to_string_pretty(&doc).unwrap();
        let m = manifest::parse(&json_text, Path::new("plugin.json"), "dir").unwrap();
        assert_same(&m, &w)?;
        let yaml_text = serde_saphyr::to_string(&doc).unwrap();
        let m = manifest::parse(&yaml_text, Path::new("plugin.yaml"), "dir")
            .map_err(|e| TestCaseError::fail(format!("{e}\n{yaml_text}")))?;
        assert_same(&m, &w)?;
    }
}

#[test]
fn hostile_manifests_are_refused_quickly_not_crashes() {
    let alias_bomb = "a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n";
    let cases: Vec<(String, &str)> = vec![
        ("[".repeat(100_000), "plugin.yaml"),
        ("- ".repeat(50_000), "plugin.yaml"),
        ("{a: ".repeat(20_000), "plugin.yaml"),
        ("{\"a\":".repeat(100_000), "plugin.json"),
        ("[".repeat(100_000), "plugin.json"),
        (alias_bomb.to_string(), "plugin.yaml"),
        ("manifest_version: 1e400\n".into(), "plugin.yaml"),
        (
            "manifest_version: 99999999999999999999999\n".into(),
            "plugin.yaml",
        ),
        ("name: *undefined\n".into(), "plugin.yaml"),
        ("name: a\n---\nname: b\n".into(), "plugin.yaml"),
    ];
    for (text, file) in cases {
        let started = std::time::Instant::now();
        let result = manifest::parse(&text, Path::new(file), "dir");
        assert!(result.is_err(), "{file}: {:?}", &text[..text.len().min(60)]);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{file}: {:?} took {:?}",
            &text[..text.len().min(60)],
            started.elapsed()
        );
    }
}
