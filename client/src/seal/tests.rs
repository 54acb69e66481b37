use std::path::{Path, PathBuf};

use ferry_runtime::executorch::ExecuTorchProgram;
use ferry_shared::manifest::TensorValue;

use super::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/pte")
        .join(name)
}

fn golden(name: &str) -> (Vec<TensorValue>, Vec<TensorValue>) {
    let text = std::fs::read(fixture(name)).expect("sidecar");
    let v: serde_json::Value = serde_json::from_slice(&text).expect("json");
    (
        serde_json::from_value(v["input"].clone()).expect("input"),
        serde_json::from_value(v["output"].clone()).expect("output"),
    )
}

fn seal(dir: &Path, name: &str, key: &[u8; 32]) -> PathBuf {
    let out = dir.join(format!("{name}.sealed"));
    ferry_fs::sealed::seal_file(&fixture(name), &out, &[3; 32], key).expect("seal");
    out
}

#[test]
fn the_runtime_loads_and_runs_a_sealed_program_and_data_file() {
    let dir = tempfile::tempdir().expect("dir");
    let (program, data) = (
        seal(dir.path(), "mlp-external-portable.pte", &[1; 32]),
        seal(dir.path(), "mlp-external-portable.ptd", &[2; 32]),
    );
    let (input, expected) = golden("mlp-external-portable.json");
    let mut p = ExecuTorchProgram::open_sources(
        Box::new(SealedSource::open(&program, &[1; 32]).expect("program")),
        Some(Box::new(SealedSource::open(&data, &[2; 32]).expect("data"))),
    )
    .expect("open");
    assert_eq!(p.load_mode(), "source");
    p.load_method("forward").expect("load forward");
    let out = p.run("forward", &input).expect("run");
    let diff = ferry_runtime::max_abs_diff(&out, &expected).expect("same shapes");
    assert!(diff < 1e-4, "off by {diff}");
    let plain = fixture("mlp-external-portable.pte");
    let mut q =
        ExecuTorchProgram::open(&plain, &[&fixture("mlp-external-portable.ptd")]).expect("plain");
    q.load_method("forward").expect("load");
    assert_eq!(q.run("forward", &input).expect("run"), out);
}

#[test]
fn a_sealed_xnnpack_program_runs_as_the_plain_one() {
    let dir = tempfile::tempdir().expect("dir");
    let program = seal(dir.path(), "cnn-xnnpack.pte", &[4; 32]);
    let (input, expected) = golden("cnn-xnnpack.json");
    let mut p = ExecuTorchProgram::open_sources(
        Box::new(SealedSource::open(&program, &[4; 32]).expect("program")),
        None,
    )
    .expect("open");
    p.load_method("forward").expect("load forward");
    let out = p.run("forward", &input).expect("run");
    let diff = ferry_runtime::max_abs_diff(&out, &expected).expect("same shapes");
    assert!(diff < 1e-3, "off by {diff}");
}

#[test]
fn a_damaged_sealed_program_fails_to_load_cleanly() {
    let dir = tempfile::tempdir().expect("dir");
    let program = seal(dir.path(), "mlp-v1-xnnpack.pte", &[5; 32]);
    let mut bytes = std::fs::read(&program).expect("read");
    // A byte inside the first piece (the program's header and flatbuffer).
    bytes[200] ^= 0x40;
    std::fs::write(&program, &bytes).expect("write");
    let source = SealedSource::open(&program, &[5; 32]).expect("the key table is intact");
    let e = ExecuTorchProgram::open_sources(Box::new(source), None).expect_err("refused");
    assert!(e.message.contains("load"), "{e}");
}
