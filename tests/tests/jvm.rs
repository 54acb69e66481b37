//! The Java binding (`client/jvm`, JNA over the C ABI) on a real JVM: compiled with `javac`,
//! run with `java` against a real server, loading the demo model through the real ExecuTorch
//! runtime and matching the exporter's output. Needs Debian's `openjdk-17-jdk-headless` and
//! `libjna-java` (installed by `tests/setup.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_tests::app::{Options, TestApp};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Debian's JNA jar.
const JNA: &str = "/usr/share/java/jna.jar";

fn java_sources(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("sources")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "java"))
        .collect();
    out.sort();
    out
}

fn floats(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{}", *v as f32))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_java_program_loads_a_model_through_the_binding() {
    assert!(
        Path::new(JNA).is_file(),
        "{JNA} is missing: run tests/setup.sh (Debian libjna-java)"
    );
    // The C library the binding loads.
    let target = ferry_tests::ffi_library_dir();

    let work = tempfile::tempdir().expect("tmp");
    let classes = work.path().join("classes");
    let mut sources = java_sources(&root().join("client/jvm/src/dev/ferry"));
    sources.push(root().join("client/jvm/test/LoadModel.java"));
    let javac = Command::new("javac")
        .arg("-Xlint:all")
        .arg("-Werror")
        .arg("-cp")
        .arg(JNA)
        .arg("-d")
        .arg(&classes)
        .args(&sources)
        .output()
        .expect("run javac (Debian openjdk-17-jdk-headless; tests/setup.sh installs it)");
    assert!(
        javac.status.success(),
        "javac failed: {}",
        String::from_utf8_lossy(&javac.stderr)
    );

    let app = TestApp::start_with(Options {
        demo: true,
        tweak: None,
    });
    let side: ferry_shared::manifest::Golden = serde_json::from_slice(
        &std::fs::read(root().join("tests/fixtures/pte/mlp-v1-xnnpack.json")).expect("sidecar"),
    )
    .expect("golden");
    std::fs::write(work.path().join("in.txt"), floats(&side.input[0].data)).expect("write");
    std::fs::write(work.path().join("want.txt"), floats(&side.output[0].data)).expect("write");
    let shape = side.input[0]
        .shape
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let run = Command::new("java")
        .arg("-cp")
        .arg(format!("{}:{JNA}", classes.display()))
        .arg(format!("-Djna.library.path={}", target.display()))
        .arg("LoadModel")
        .arg(app.url())
        .arg(app.dir.path().join("keys/trust.json"))
        .arg(work.path().join("cache"))
        .arg(work.path().join("in.txt"))
        .arg(shape)
        .arg(work.path().join("want.txt"))
        .arg(side.atol.to_string())
        .output()
        .expect("run java");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("variant=xnnpack-fp32"), "{stdout}");
    assert!(stdout.contains("source=downloaded"), "{stdout}");
    let diff: f64 = stdout
        .split("max_abs_diff=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("a max_abs_diff figure");
    assert!(diff <= side.atol, "{diff}");
    let report_line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("report="))
        .expect("a report line");
    let report: serde_json::Value = serde_json::from_str(report_line).expect("report JSON");
    assert_eq!(report["registered_backends"][0], "XnnpackBackend");
    // Errors cross as exceptions with the stable code.
    assert!(stdout.contains("wrong shape: shape holds"), "{stdout}");
    assert!(
        stdout.contains("over budget: code=download_deferred"),
        "{stdout}"
    );
    // (FERRY_ERR_REJECTED is 9.)
    assert!(
        stdout.contains("missing model: status=9 code=model_not_found"),
        "{stdout}"
    );
}
