//! `docs/architecture.md` is true: its table of documented features names folders that exist,
//! has a row for every page of `docs/`, and names every end-to-end test folder.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The feature table's rows: (page, code paths, test paths).
fn feature_rows() -> Vec<(String, Vec<String>, Vec<String>)> {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).expect("the page");
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    text.lines()
        .filter(|l| l.starts_with("| `docs/"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            // | page | feature | code | tests |
            assert_eq!(cells.len(), 6, "a row of four cells: {l}");
            (
                ticked(cells[1]).concat(),
                ticked(cells[3]),
                ticked(cells[4]),
            )
        })
        .collect()
}

#[test]
fn every_path_in_the_feature_table_exists() {
    let rows = feature_rows();
    assert!(rows.len() >= 10, "{rows:?}");
    for (page, code, tests) in &rows {
        assert!(root().join(page).is_file(), "{page} is not a page of docs/");
        assert!(
            !code.is_empty() && !tests.is_empty(),
            "{page}: code and tests named"
        );
        for p in code.iter().chain(tests) {
            assert!(root().join(p).exists(), "{page}: {p} does not exist");
        }
    }
}

#[test]
fn every_page_of_docs_has_a_row() {
    let named: BTreeSet<String> = feature_rows()
        .into_iter()
        .map(|(page, _, _)| page)
        .collect();
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".md") {
            let page = format!("docs/{name}");
            assert!(
                named.contains(&page),
                "{page} has no row in docs/architecture.md"
            );
        }
    }
}

#[test]
fn every_end_to_end_test_folder_is_in_the_table() {
    let named: BTreeSet<String> = feature_rows()
        .into_iter()
        .flat_map(|(_, _, tests)| tests)
        .collect();
    let e2e = root().join("tests/tests/e2e");
    let mut folders = 0;
    for entry in std::fs::read_dir(&e2e).expect("e2e") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_dir() {
            folders += 1;
            let folder = format!("tests/tests/e2e/{}/", entry.file_name().to_string_lossy());
            assert!(
                named.contains(&folder),
                "{folder} is not in docs/architecture.md"
            );
        }
    }
    assert!(folders >= 8, "{folders} folders");
}
