//! Hermes's manifest gate `requires_hermes` (a version specifier such as
//! `">=0.12,<1"`), checked against the Hermes plugin API version plughost
//! declares: a plugin that needs a newer Hermes fails to load, saying so,
//! instead of failing later on a missing member.

use std::cmp::Ordering;
use std::path::Path;

/// The Hermes release whose plugin API plughost follows (the newest
/// `hermes_cli/plugins.py` read for this dialect).
pub const HERMES_VERSION: &str = "0.19.0";

/// Why the plugin in `dir` cannot load under [`HERMES_VERSION`]; `None`
/// when it declares no `requires_hermes` or the declaration is met. A
/// specifier plughost cannot read is reported, not guessed at.
pub fn unmet(dir: &Path) -> Option<String> {
    let path = super::manifest::find(dir)?;
    let text = std::fs::read_to_string(&path).ok()?;
    let root: serde_json::Value = serde_saphyr::from_str(&text).ok()?;
    let spec = match root.get("requires_hermes")? {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => format!(">={n}"),
        _ => return Some("requires_hermes must be a version specifier such as \">=0.12\"".into()),
    };
    match satisfied(&spec, HERMES_VERSION) {
        Ok(true) => None,
        Ok(false) => Some(format!(
            "requires Hermes {spec}; plughost provides the Hermes {HERMES_VERSION} plugin API"
        )),
        Err(clause) => Some(format!(
            "requires_hermes '{spec}': cannot read '{clause}' (use comparisons like >=0.12,<1)"
        )),
    }
}

fn parse(version: &str) -> Option<Vec<u64>> {
    let core = version
        .trim()
        .trim_start_matches('v')
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()?;
    let parts: Option<Vec<u64>> = core.split('.').map(|p| p.parse().ok()).collect();
    parts.filter(|p| !p.is_empty())
}

fn compare(a: &[u64], b: &[u64]) -> Ordering {
    let n = a.len().max(b.len());
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    (0..n)
        .map(|i| at(a, i).cmp(&at(b, i)))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Whether `version` meets every comma-separated clause of `spec`; the
/// clause that cannot be read otherwise. A bare version means `>=`.
pub fn satisfied(spec: &str, version: &str) -> Result<bool, String> {
    let have = parse(version).ok_or_else(|| version.to_string())?;
    for clause in spec.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let (op, rest) = ["~=", ">=", "<=", "==", "!=", ">", "<"]
            .iter()
            .find_map(|op| clause.strip_prefix(op).map(|r| (*op, r)))
            .unwrap_or((">=", clause));
        let want = parse(rest).ok_or_else(|| clause.to_string())?;
        let ord = compare(&have, &want);
        let ok = match op {
            ">=" => ord.is_ge(),
            "<=" => ord.is_le(),
            ">" => ord.is_gt(),
            "<" => ord.is_lt(),
            "==" => ord.is_eq(),
            "!=" => ord.is_ne(),
            // ~=X.Y: >= X.Y and the same X (all but the last component).
            _ => {
                let prefix = &want[..want.len().saturating_sub(1).max(1)];
                ord.is_ge() && compare(&have[..prefix.len().min(have.len())], prefix).is_eq()
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::satisfied;

    #[test]
    fn specifiers() {
        assert_eq!(satisfied(">=0.12", "0.19.0"), Ok(true));
        assert_eq!(satisfied(">=0.12,<1", "0.19.0"), Ok(true));
        assert_eq!(satisfied(">=1.0", "0.19.0"), Ok(false));
        assert_eq!(satisfied("~=0.19", "0.19.3"), Ok(true));
        assert_eq!(satisfied("~=0.18", "1.0"), Ok(false));
        assert_eq!(satisfied("0.9", "0.19.0"), Ok(true));
        assert_eq!(satisfied("==0.19.0", "0.19"), Ok(true));
        assert!(satisfied(">=banana", "0.19.0").is_err());
    }
}
