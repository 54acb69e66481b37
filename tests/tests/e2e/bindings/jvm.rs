//! The Java binding (`client/jvm`, JNA over the C ABI) on a real JVM: compiled with `javac`,
//! run with `java` against a real server, loading the demo model through the real ExecuTorch
//! runtime and matching the exporter's output. Needs Debian's `openjdk-17-jdk-headless` and
//! `libjna-java` (installed by `tests/setup.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_client::max_abs_diff;
use ferry_server::release::sign::VariantsFile;
use ferry_shared::manifest::{Delegate, TensorValue};
use ferry_tests::app::{Options, TestApp, variant};

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Debian's JNA jar.
pub(crate) const JNA: &str = "/usr/share/java/jna.jar";

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

/// Compiles the binding and the test programs with `javac -Xlint:all -Werror` into
/// `work/classes`.
pub(crate) fn compile(work: &Path) -> PathBuf {
    assert!(
        Path::new(JNA).is_file(),
        "{JNA} is missing: run tests/setup.sh (Debian libjna-java)"
    );
    let classes = work.join("classes");
    let mut sources = java_sources(&root().join("client/jvm/src/dev/ferry"));
    sources.extend(java_sources(&root().join("client/jvm/test")));
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
    classes
}

/// `java` running the test program `class` from `classes`, with JNA and the C library in
/// `target`, given a server's URL and trust file (the program's first two arguments).
pub(crate) fn java(classes: &Path, target: &Path, class: &str, app: &TestApp) -> Command {
    let mut cmd = Command::new("java");
    cmd.arg("-cp")
        .arg(format!("{}:{JNA}", classes.display()))
        .arg(format!("-Djna.library.path={}", target.display()))
        .arg(class)
        .arg(app.url())
        .arg(app.dir.path().join("keys/trust.json"));
    cmd
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
    // The C library the binding loads.
    let target = ferry_tests::ffi_library_dir();

    let work = tempfile::tempdir().expect("tmp");
    let classes = compile(work.path());

    let app = TestApp::start_with(Options {
        demo: true,
        keys: None,
        store: None,
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
    let run = java(&classes, &target, "LoadModel", &app)
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
    // The signed contract reaches Java as JSON, and an input against it is refused.
    let contract_line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("contract="))
        .expect("a contract line");
    let contract: serde_json::Value = serde_json::from_str(contract_line).expect("contract JSON");
    assert_eq!(contract["forward"]["inputs"][0]["dtype"], "float32");
    assert_eq!(contract["forward"]["inputs"][0]["dynamism"], "static");
    assert!(
        stdout.contains("against the contract: code=input_mismatch"),
        "{stdout}"
    );
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

/// One tensor per line for `TypedModel`: element type, shape, values.
fn tensor_lines(ts: &[TensorValue]) -> String {
    ts.iter()
        .map(|t| {
            let shape = if t.shape.is_empty() {
                "-".to_string()
            } else {
                t.shape
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let values: Vec<String> = t.data.iter().map(|v| format!("{v:?}")).collect();
            format!("{} {shape} {}\n", t.dtype, values.join(" "))
        })
        .collect()
}

/// The `out DTYPE SHAPE VALUES...` lines `TypedModel` printed.
fn printed_outputs(stdout: &str) -> Vec<TensorValue> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("out "))
        .map(|l| {
            let mut parts = l.split_whitespace();
            let dtype = parts.next().expect("dtype").to_string();
            let shape = match parts.next().expect("shape") {
                "-" => Vec::new(),
                s => s.split(',').map(|d| d.parse().expect("dim")).collect(),
            };
            let data = parts.map(|v| v.parse().expect("value")).collect();
            TensorValue { dtype, shape, data }
        })
        .collect()
}

#[test]
fn java_runs_tensors_of_every_element_type_through_the_binding() {
    let target = ferry_tests::ffi_library_dir();
    let work = tempfile::tempdir().expect("tmp");
    let classes = compile(work.path());
    let app = TestApp::start();
    for (model, file) in [
        ("typed-io", "typed-io-portable"),
        ("half-io", "half-io-portable"),
    ] {
        let only = variant(
            "only",
            &format!("{file}.pte"),
            Delegate::Portable,
            ">=1.0.0",
            "*",
        );
        app.publish(&VariantsFile {
            // typed-io carries signed metadata; half-io none.
            labels: (model == "typed-io").then(|| "../eval/digits-labels.txt".into()),
            preprocess: (model == "typed-io").then(|| {
                toml::from_str(
                    "resize = { width = 32, height = 24, filter = \"nearest\" }\n\
                     color = \"rgb\"\nlayout = \"nchw\"\nmean = [0.1, 0.2, 0.3]\n\
                     std = [2.0]",
                )
                .expect("toml")
            }),
            ..ferry_tests::releases::release(model, "1.0.0", vec![only])
        });
        let side: serde_json::Value = serde_json::from_slice(
            &std::fs::read(root().join(format!("tests/fixtures/pte/{file}.json")))
                .expect("sidecar"),
        )
        .expect("json");
        let input: Vec<TensorValue> = serde_json::from_value(side["input"].clone()).expect("in");
        let want: Vec<TensorValue> = serde_json::from_value(side["output"].clone()).expect("out");
        let inputs = work.path().join(format!("{model}.txt"));
        std::fs::write(&inputs, tensor_lines(&input)).expect("write");
        let run = java(&classes, &target, "TypedModel", &app)
            .arg(work.path().join(format!("cache-{model}")))
            .arg(model)
            .arg("forward")
            .arg(&inputs)
            .output()
            .expect("run java");
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let got = printed_outputs(&stdout);
        let kinds = |ts: &[TensorValue]| -> Vec<(String, Vec<u64>)> {
            ts.iter()
                .map(|t| (t.dtype.clone(), t.shape.clone()))
                .collect()
        };
        // The exporter's element types and shapes, and its values within atol.
        assert_eq!(kinds(&got), kinds(&want), "{stdout}");
        let diff = max_abs_diff(&got, &want).expect("same types and shapes");
        let atol = side["atol"].as_f64().expect("atol");
        assert!(
            diff <= atol,
            "{model}: max |diff| {diff} > {atol}\n{stdout}"
        );
        assert!(
            stdout.contains("refused: code=invalid_argument"),
            "{stdout}"
        );
        // Thermal state and telemetry through the binding: the send leaves nothing queued.
        assert!(
            stdout.contains("thermal refused: code=invalid_argument"),
            "{stdout}"
        );
        assert!(stdout.contains(" queued=0\n"), "{stdout}");
        // An app metric through the binding, and a bad name refused.
        assert!(
            stdout.contains("metric recorded for 1 model(s)\n"),
            "{stdout}"
        );
        assert!(
            stdout.contains("metric refused: code=invalid_argument"),
            "{stdout}"
        );
        assert!(
            stdout.contains("absent asset: code=not_found\n"),
            "{stdout}"
        );
        // The signed metadata, typed, through the binding.
        if model == "typed-io" {
            assert!(
                stdout.contains("labels zero,one,two,three,four,five,six,seven,eight,nine\n"),
                "{stdout}"
            );
            assert!(
                stdout.contains("preprocess 32x24 nearest rgb nchw null [0.1, 0.2, 0.3] [2.0]"),
                "{stdout}"
            );
            let asset = stdout
                .lines()
                .find_map(|l| l.strip_prefix("asset "))
                .expect("asset line");
            let text = std::fs::read_to_string(asset).expect("the asset file");
            assert!(text.starts_with("zero\n"));
            // Its bytes through the binding's reader (which decrypts a sealed variant's).
            assert!(
                stdout.contains(&format!("asset bytes {} zero\n", text.len())),
                "{stdout}"
            );
        } else {
            assert!(stdout.contains("labels none\n"), "{stdout}");
            assert!(stdout.contains("asset null\n"), "{stdout}");
            assert!(!stdout.contains("preprocess "), "{stdout}");
        }
    }
}

/// A JVM app whose native code crashes dies with it (the driver bug inside ExecuTorch's own
/// read of the first variant, raised by `tests/c/crash_preload.c`); the next JVM start passes
/// over that variant through the same C ABI, names the crash in its report, and an app that
/// forgets the crash gets the variant again.
#[test]
fn a_jvm_app_that_crashes_natively_passes_over_the_variant_at_its_next_start() {
    let target = ferry_tests::ffi_library_dir();
    let work = tempfile::tempdir().expect("tmp");
    let classes = compile(work.path());
    let app = TestApp::start();
    let xnn = |id: &str, file: &str| variant(id, file, Delegate::Xnnpack, ">=1.0.0", "*");
    app.publish(&ferry_tests::releases::release(
        "crashy",
        "1.0.0",
        vec![
            xnn("xnnpack-int8", "mlp-v1-xnnpack-int8.pte"),
            xnn("xnnpack-fp32", "mlp-v1-xnnpack.pte"),
        ],
    ));
    let launch = |cache: &str, crash: Option<&str>, extra: &[&str]| {
        let mut cmd = Command::new("java");
        // The crash report of the JVM that dies goes to the test's folder.
        cmd.arg(format!(
            "-XX:ErrorFile={}/hs_err_%p.log",
            work.path().display()
        ))
        .arg("-cp")
        .arg(format!("{}:{JNA}", classes.display()))
        .arg(format!("-Djna.library.path={}", target.display()))
        .arg("CrashLoad")
        .arg(app.url())
        .arg(app.dir.path().join("keys/trust.json"))
        .arg(work.path().join(cache))
        .arg("crashy")
        .args(extra);
        if let Some(digest) = crash {
            cmd.env("LD_PRELOAD", ferry_tests::crash_preload())
                .env("FERRY_CRASH_PATH", digest)
                .env("FERRY_CRASH_HOW", "segv");
        }
        let out = cmd.output().expect("run java");
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // A clean start: the first candidate, and its file.
    let (status, clean) = launch("clean", None, &[]);
    assert!(status.success(), "{clean}");
    let first = clean
        .lines()
        .find_map(|l| l.strip_prefix("variant="))
        .expect("variant")
        .to_string();
    let digest = std::fs::read_dir(work.path().join("clean/blobs/sha256"))
        .expect("blobs")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.len() == 64)
        .expect("the loaded file");
    // The crash takes the JVM down.
    let (status, out) = launch("app", Some(&digest), &[]);
    assert!(
        !status.success(),
        "the JVM died with its native code: {out}"
    );
    assert!(!out.contains("variant="), "{out}");
    // The next JVM start, the driver bug still there: the other variant, the crash named.
    let (status, out) = launch("app", Some(&digest), &[]);
    assert!(status.success(), "{out}");
    let variant = out
        .lines()
        .find_map(|l| l.strip_prefix("variant="))
        .expect("variant");
    assert_ne!(variant, first, "{out}");
    let report: serde_json::Value = serde_json::from_str(
        out.lines()
            .find_map(|l| l.strip_prefix("report="))
            .expect("report"),
    )
    .expect("report JSON");
    assert_eq!(report["attempts"][0]["variant"], first.as_str(), "{report}");
    assert_eq!(report["attempts"][0]["error_code"], "crashed", "{report}");
    assert_eq!(report["attempts"][0]["stage"], "load_program", "{report}");
    // The app forgets the crash (the bug is gone): the first variant again.
    let (status, out) = launch("app", None, &["forget"]);
    assert!(status.success(), "{out}");
    assert!(out.contains("forgotten=1"), "{out}");
    assert!(out.contains(&format!("variant={first}")), "{out}");
}
