//! `ferry inspect` as a user runs it: real binary, real fixture files.

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/pte")
        .join(name)
}

fn ferry(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(args)
        .output()
        .expect("run ferry")
}

#[test]
fn json_report() {
    let path = fixture("partial-xnnpack.pte");
    let out = ferry(&["inspect", "--json", path.to_str().expect("utf8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["file_identifier"], "ET12");
    assert_eq!(v["methods"][0]["delegate_calls"]["XnnpackBackend"], 2);
    assert_eq!(v["methods"][0]["kernel_calls"]["aten::cumsum.out"], 1);
    assert_eq!(
        v["methods"][0]["summary"],
        "2 XnnpackBackend calls, 1 portable kernel call: aten::cumsum.out"
    );
}

#[test]
fn table_report() {
    let path = fixture("cnn-xnnpack.pte");
    let out = ferry(&["inspect", path.to_str().expect("utf8")]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf8");
    assert!(text.contains("method forward"), "{text}");
    assert!(text.contains("aten::mean.out"), "{text}");
}

#[test]
fn invalid_files_fail_with_one_line() {
    let dir = std::env::temp_dir().join(format!("ferry-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let good = std::fs::read(fixture("mlp-v1-xnnpack.pte")).expect("fixture");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.pte", vec![], "pte_truncated"),
        (
            "zip.pte",
            b"PK\x03\x04rest of a zip".to_vec(),
            "pte_not_a_program",
        ),
        ("cut.pte", good[..good.len() / 2].to_vec(), "pte_truncated"),
    ];
    for (name, bytes, code) in cases {
        let p = dir.join(name);
        std::fs::write(&p, bytes).expect("write");
        let out = ferry(&["inspect", p.to_str().expect("utf8")]);
        assert!(!out.status.success(), "{name} was accepted");
        let err = String::from_utf8(out.stderr).expect("utf8");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(code), "{name}: {err}");
    }
    let out = ferry(&["inspect", dir.join("missing.pte").to_str().expect("utf8")]);
    assert!(!out.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
