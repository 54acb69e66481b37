//! The error-code catalogue is one set in three places: `ferry_shared::errors::ErrorCode` (what
//! the code emits), `schemas/error.schema.json` (what other clients code against) and
//! `docs/errors.md` (what people read). These tests fail when the three differ, and when source
//! code spells a code as a string literal instead of going through `ErrorCode`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ferry_shared::errors::ErrorCode;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn in_code() -> BTreeSet<String> {
    ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect()
}

fn show(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}

#[test]
fn the_schema_enum_is_the_catalogue() {
    let text = std::fs::read_to_string(root().join("schemas/error.schema.json")).expect("schema");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("json");
    // The known codes are the first branch of an open list (a newer server may add codes).
    let listed: BTreeSet<String> = schema["properties"]["code"]["anyOf"][0]["enum"]
        .as_array()
        .expect("code has an enum")
        .iter()
        .map(|v| v.as_str().expect("string").to_string())
        .collect();
    let code = in_code();
    let missing: BTreeSet<_> = code.difference(&listed).cloned().collect();
    let extra: BTreeSet<_> = listed.difference(&code).cloned().collect();
    assert!(
        missing.is_empty(),
        "in ErrorCode but not in the schema: {}",
        show(&missing)
    );
    assert!(
        extra.is_empty(),
        "in the schema but not in ErrorCode: {}",
        show(&extra)
    );
}

#[test]
fn the_docs_table_is_the_catalogue() {
    let text = std::fs::read_to_string(root().join("docs/errors.md")).expect("docs");
    let mut listed = BTreeSet::new();
    for line in text.lines() {
        // Table rows start with "| `code` |".
        if let Some(rest) = line.strip_prefix("| `")
            && let Some((code, tail)) = rest.split_once('`')
        {
            assert!(tail.starts_with(" |"), "odd row: {line}");
            let cells: Vec<&str> = line.split(" | ").collect();
            assert!(
                cells.len() >= 4 && cells.iter().skip(1).all(|c| !c.trim().is_empty()),
                "{code}: every row says who, what it means and what to do: {line}"
            );
            assert!(listed.insert(code.to_string()), "{code} listed twice");
        }
    }
    let code = in_code();
    let missing: BTreeSet<_> = code.difference(&listed).cloned().collect();
    let extra: BTreeSet<_> = listed.difference(&code).cloned().collect();
    assert!(
        missing.is_empty(),
        "in ErrorCode but not in docs/errors.md: {}",
        show(&missing)
    );
    assert!(
        extra.is_empty(),
        "in docs/errors.md but not in ErrorCode: {}",
        show(&extra)
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("list").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The string literals of `text`, with their line numbers (good enough for our own code:
/// ignores raw strings and char literals, which hold no codes).
fn literals(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut line = 1;
    while let Some((_, c)) = chars.next() {
        match c {
            '\n' => line += 1,
            '/' if chars.peek().map(|(_, n)| *n) == Some('/') => {
                for (_, n) in chars.by_ref() {
                    if n == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '\'' => {
                // A char literal or a lifetime: skip an escaped or plain char and its quote.
                if let Some((_, n)) = chars.next() {
                    if n == '\\' {
                        chars.next();
                    }
                    if chars.peek().map(|(_, q)| *q) == Some('\'') {
                        chars.next();
                    }
                }
            }
            '"' => {
                let start = line;
                let mut s = String::new();
                while let Some((_, n)) = chars.next() {
                    match n {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        '\n' => {
                            line += 1;
                            s.push(n);
                        }
                        _ => s.push(n),
                    }
                }
                out.push((start, s));
            }
            _ => {}
        }
    }
    out
}

#[test]
fn source_code_emits_codes_only_through_the_type() {
    let codes = in_code();
    let mut files = Vec::new();
    for dir in ["server/src", "client/src", "shared/src", "shared/fs/src"] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut offenders = Vec::new();
    for f in &files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name == "errors.rs" || name == "tests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read");
        // Unit tests may name codes to assert on them.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (line, lit) in literals(text) {
            if codes.contains(&lit) {
                offenders.push(format!("{}:{line}: \"{lit}\"", f.display()));
            }
        }
        for (i, l) in text.lines().enumerate() {
            if l.contains("code: \"") {
                offenders.push(format!("{}:{}: {}", f.display(), i + 1, l.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "error codes spelled as strings instead of ErrorCode:\n{}",
        offenders.join("\n")
    );
    assert!(files.len() > 40, "scanned only {} files", files.len());
}
