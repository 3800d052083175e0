//! "Did you mean" suggestions for names the user typed: the closest known
//! names by edit distance, so a typo gets an answer instead of a bare
//! "not found".

/// Edit distance counting a swap of two neighbours as one edit (optimal
/// string alignment), over chars: `pnig` is one edit from `ping`.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The known names close to `typed`, closest first (at most three): within
/// a third of the typed name's length (at least 1, at most 3 edits), or
/// containing it / contained in it case-insensitively.
pub(crate) fn closest<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let lower = typed.to_lowercase();
    let limit = (typed.chars().count() / 3).clamp(1, 3);
    let mut scored: Vec<(usize, &str)> = known
        .into_iter()
        .filter(|k| *k != typed)
        .filter_map(|k| {
            let d = distance(&lower, &k.to_lowercase());
            let related = lower.len() >= 3
                && (k.to_lowercase().contains(&lower) || lower.contains(&k.to_lowercase()));
            (d <= limit || related).then_some((d, k))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(3)
        .map(|(_, k)| k.to_string())
        .collect()
}

/// `" (did you mean 'a'?)"`, `" (did you mean 'a' or 'b'?)"`, or "".
pub(crate) fn did_you_mean<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let found = closest(typed, known);
    match found.as_slice() {
        [] => String::new(),
        [only] => format!(" (did you mean '{only}'?)"),
        [first @ .., last] => format!(
            " (did you mean {} or '{last}'?)",
            first
                .iter()
                .map(|f| format!("'{f}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_name_and_strangers_find_nothing() {
        let known = ["disk-cleanup", "command-guard", "tool-audit"];
        assert_eq!(closest("disk-cleanupp", known), vec!["disk-cleanup"]);
        assert_eq!(closest("comand-guard", known), vec!["command-guard"]);
        assert!(closest("zzz", known).is_empty());
        assert_eq!(
            did_you_mean("audit_sumary", ["audit_summary", "read_file"]),
            " (did you mean 'audit_summary'?)"
        );
        assert_eq!(did_you_mean("x", ["read_file"]), "");
        assert_eq!(
            did_you_mean("list", ["list_dir", "list_all"]),
            " (did you mean 'list_all' or 'list_dir'?)"
        );
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("pnig", "ping"), 1);
        assert_eq!(closest("/pnig", ["/ping", "/help"]), vec!["/ping"]);
    }
}
