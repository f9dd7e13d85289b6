//! The check that a crate's SQL files and its Rust constants spell the shared names alike
//! (the core's `names`, skiplock-workflows' `names`): each name is used where the SQL needs
//! it, and no literal anywhere is a near miss of one (a typo, `_` for `-`, a rename on one
//! side only).

use std::collections::BTreeMap;
use std::path::Path;

/// Fails the test when `names` (each with the files, relative to one of `dirs`, that must
/// use it) and the SQL files under `dirs` disagree; `not_names` are literals close to a name
/// on purpose, each with why.
pub fn check(names: &[(&str, &[&str])], dirs: &[&Path], not_names: &[(&str, &str)]) {
    let mut files = BTreeMap::new();
    for d in dirs {
        if d.is_dir() {
            sql_files(d, d, &mut files);
        }
    }
    for (name, wanted) in names {
        for f in *wanted {
            let sql = files
                .get(*f)
                .unwrap_or_else(|| panic!("sql/{f} is missing"));
            assert!(
                literals(sql).iter().any(|l| l == name),
                "sql/{f} no longer uses '{name}': the Rust constant and the SQL disagree"
            );
        }
    }
    let all: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
    for (f, sql) in &files {
        for lit in literals(sql) {
            if all.contains(&lit.as_str()) || not_names.iter().any(|(n, _)| *n == lit) {
                continue;
            }
            for name in &all {
                let near = distance(&lit.to_lowercase(), name) <= 1
                    || lit.replace(['_', '-', '.'], "") == name.replace(['_', '-', '.'], "");
                assert!(
                    !near,
                    "sql/{f} has '{lit}', a near miss of the shared name '{name}'"
                );
            }
        }
    }
}

/// The single-quoted literals of a SQL text, outside `--` comments.
pub fn literals(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '-' if chars.peek() == Some(&'-') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '\'' => {
                let mut lit = String::new();
                while let Some(c) = chars.next() {
                    if c == '\'' {
                        if chars.peek() == Some(&'\'') {
                            chars.next();
                            lit.push('\'');
                            continue;
                        }
                        break;
                    }
                    lit.push(c);
                }
                out.push(lit);
            }
            _ => {}
        }
    }
    out
}

fn sql_files(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sql_files(&p, base, out);
        } else if p.extension().is_some_and(|x| x == "sql") {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            out.insert(rel, std::fs::read_to_string(&p).unwrap());
        }
    }
}

/// The edit distance of two names.
pub fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_scanner_skips_comments_and_unescapes_quotes() {
        assert_eq!(
            literals("SELECT 'a''b', x -- 'not this'\n, 'c'"),
            vec!["a'b".to_string(), "c".to_string()]
        );
        assert_eq!(distance("process-packet", "process_packet"), 1);
        assert_eq!(distance("pack", "pack"), 0);
    }

    #[test]
    #[should_panic(expected = "near miss")]
    fn a_near_miss_fails_the_check() {
        let dir = std::env::temp_dir().join(format!("sql-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.sql"), "SELECT 'process_packet'").unwrap();
        check(&[("process-packet", &[])], &[&dir], &[]);
    }
}
