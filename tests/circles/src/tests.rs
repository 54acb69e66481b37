use super::*;

/// Writes `files` (path, text) under a new folder and returns it.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    dir
}

fn circles(files: &[(&str, &str)]) -> Vec<Circle> {
    let dir = tree(files);
    Crate::read(&dir.path().join("lib.rs"))
        .expect("read")
        .circles(Rule::Rooms)
}

fn strict_circles(files: &[(&str, &str)]) -> Vec<Circle> {
    let dir = tree(files);
    Crate::read(&dir.path().join("lib.rs"))
        .expect("read")
        .circles(Rule::Strict)
}

#[test]
fn two_siblings_that_import_each_other_are_a_circle() {
    let found = circles(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "b.rs",
            "pub struct B;\npub fn f() -> super::a::A { super::a::A }\n",
        ),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    let names: Vec<String> = found[0]
        .files
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["a.rs", "b.rs"]);
    assert_eq!(found[0].arrows.len(), 2);
}

#[test]
fn a_circle_through_three_files_in_nested_folders_is_found() {
    let found = circles(&[
        ("lib.rs", "pub mod x;\nmod c;\n"),
        ("x/mod.rs", "pub mod a;\npub mod b;\n"),
        ("x/a.rs", "use super::b::B;\npub struct A;\n"),
        ("x/b.rs", "use crate::c::C;\npub struct B;\n"),
        ("c.rs", "pub struct C(crate::x::a::A);\n"),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].files.len(), 3);
}

#[test]
fn a_parent_declaring_and_re_exporting_its_children_is_not_a_circle() {
    let found = circles(&[
        ("lib.rs", "pub mod x;\n"),
        (
            "x/mod.rs",
            "pub mod a;\npub use a::A;\npub use self::a::*;\npub struct Shared;\n",
        ),
        (
            "x/a.rs",
            "use super::Shared;\npub struct A;\npub fn f(_: Shared) {}\n",
        ),
    ]);
    assert!(found.is_empty(), "{found:?}");
    assert!(
        strict_circles(&[
            ("lib.rs", "pub mod x;\n"),
            (
                "x/mod.rs",
                "pub mod a;\npub use a::A;\npub struct Shared;\n"
            ),
            ("x/a.rs", "use super::Shared;\npub struct A;\n"),
        ])
        .is_empty()
    );
    // A re-exported name the parent's own code uses is imported (counted by the strict rule).
    let found = strict_circles(&[
        ("lib.rs", "pub mod x;\n"),
        (
            "x/mod.rs",
            "pub mod a;\npub use a::A;\npub struct Shared;\npub fn g() -> A { A }\n",
        ),
        (
            "x/a.rs",
            "use super::Shared;\npub struct A;\npub fn f(_: Shared) {}\n",
        ),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
}

#[test]
fn test_code_is_left_out() {
    let found = circles(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "b.rs",
            "pub struct B;\n#[cfg(test)]\nmod tests { use crate::a::A; }\n#[cfg(test)]\nfn t() -> crate::a::A { crate::a::A }\n",
        ),
    ]);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn names_from_other_crates_and_locals_are_not_arrows() {
    let dir = tree(&[
        (
            "lib.rs",
            "mod a;\nuse std::collections::BTreeMap;\npub fn f(m: BTreeMap<u8, u8>) -> usize { m.len() }\n",
        ),
        (
            "a.rs",
            "use serde::Deserialize;\npub fn g() -> Option<u8> { Option::None }\n",
        ),
    ]);
    let arrows = Crate::read(&dir.path().join("lib.rs"))
        .expect("read")
        .arrows(Rule::Strict);
    assert!(arrows.is_empty(), "{arrows:?}");
}

#[test]
fn a_missing_module_file_is_an_error_not_a_panic() {
    let dir = tree(&[("lib.rs", "mod gone;\n")]);
    let err = Crate::read(&dir.path().join("lib.rs")).expect_err("missing");
    assert!(err.to_string().contains("mod gone;"), "{err}");
}

#[test]
fn a_parent_whose_code_uses_a_child_that_imports_it_is_one_room_or_a_strict_circle() {
    let files = [
        ("lib.rs", "pub mod x;\n"),
        ("x/mod.rs", "pub mod a;\npub struct Handle(pub a::Marks);\n"),
        (
            "x/a.rs",
            "pub struct Marks;\npub fn tick(_: &super::Handle) {}\n",
        ),
    ];
    assert!(circles(&files).is_empty());
    assert_eq!(strict_circles(&files).len(), 1);
}

#[test]
fn a_name_re_exported_by_the_root_points_at_the_file_that_declares_it() {
    // a.rs uses crate::B, which lib.rs re-exports from b.rs; b.rs uses a.rs.
    let found = circles(&[
        ("lib.rs", "mod a;\nmod b;\npub use b::B;\n"),
        ("a.rs", "pub struct A;\npub fn f(_: crate::B) {}\n"),
        ("b.rs", "pub struct B(pub crate::a::A);\n"),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    // Through a glob re-export and a rename too.
    let found = circles(&[
        (
            "lib.rs",
            "mod a;\nmod b;\nmod c;\npub use b::*;\npub use c::C as Renamed;\n",
        ),
        ("a.rs", "pub struct A;\nuse crate::{B, Renamed};\n"),
        ("b.rs", "pub struct B(pub crate::a::A);\n"),
        ("c.rs", "pub struct C(pub crate::a::A);\n"),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].files.len(), 3, "{found:?}");
}

#[test]
fn paths_inside_macro_calls_are_arrows() {
    let found = circles(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "pub fn f() -> String { format!(\"{}\", crate::b::name()) }\npub fn g() {}\n",
        ),
        (
            "b.rs",
            "pub fn name() -> &'static str { \"b\" }\npub fn h() { m!({\"key\": crate::a::g()}) }\n",
        ),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
}

#[test]
fn a_glob_of_another_crate_does_not_hide_a_later_re_export() {
    let found = circles(&[
        (
            "lib.rs",
            "mod a;\nmod b;\npub use std::collections::*;\npub use b::*;\n",
        ),
        ("a.rs", "pub struct A;\npub fn f(_: crate::B) {}\n"),
        ("b.rs", "pub struct B(pub crate::a::A);\n"),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
}
