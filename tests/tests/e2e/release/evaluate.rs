//! The accuracy evaluation through the real runtime, on a real dataset: scikit-learn's digits,
//! a float classifier, a calibrated INT8 one and a damaged INT8 one, all from the exporter
//! (`tests/fixtures/export_eval.py`). Figures are checked against what eager PyTorch measured
//! on the same set when the fixtures were made (`tests/fixtures/eval/digits.json`).

use std::path::PathBuf;

use ferry_server::release::evaluate::run::evaluate;
use ferry_server::release::evaluate::{EvaluationSpec, Metric};
use ferry_server::release::sign::VariantsFile;
use ferry_shared::manifest::Delegate;
use ferry_tests::app::variant;

fn dir() -> PathBuf {
    ferry_tests::fixtures_dir().join("eval")
}

fn eager() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir().join("digits.json")).expect("digits.json"))
        .expect("json")
}

fn release(metric: Metric, max_drop: Option<f64>, max_error: Option<f64>) -> VariantsFile {
    let variants = vec![
        variant("fp32", "digits-fp32.pte", Delegate::Xnnpack, ">=1.0.0", "*"),
        variant("int8", "digits-int8.pte", Delegate::Xnnpack, ">=1.0.0", "*"),
        variant(
            "int8-damaged",
            "digits-int8-damaged.pte",
            Delegate::Xnnpack,
            ">=1.0.0",
            "*",
        ),
    ];
    VariantsFile {
        evaluation: Some(EvaluationSpec {
            dataset: "digits-test.safetensors".into(),
            metric,
            reference: "fp32".parse().expect("id"),
            max_drop,
            max_error,
            baseline: None,
            method: "forward".into(),
        }),
        ..ferry_tests::releases::release("digits", "1.0.0", variants)
    }
}

#[test]
fn top1_through_the_runtime_matches_eager_pytorch_and_fails_the_damaged_variant() {
    let mut seen = Vec::new();
    let report = evaluate(
        &release(Metric::Top1, Some(0.01), None),
        &dir(),
        &mut |done, total| seen.push((done, total)),
    )
    .expect("evaluates");
    let want = eager();
    // 540 samples, batches of 8: 536 scored, the trailing 4 dropped and reported.
    assert_eq!(
        report.evaluation.samples,
        want["evaluated_samples"].as_u64().expect("n")
    );
    assert_eq!(report.evaluation.dropped, 4);
    assert_eq!(seen.last(), Some(&(536, 536)));
    for id in ["fp32", "int8", "int8-damaged"] {
        let got = report.evaluation.results[id].value.expect("value");
        let eager = want["eager_top1"][format!("digits-{id}")]
            .as_f64()
            .expect("eager");
        // The runtime's INT8 kernels round differently from PyTorch's reference: a few samples.
        assert!(
            (got - eager).abs() <= 0.01,
            "{id}: runtime {got}, eager {eager}"
        );
    }
    let r = &report.evaluation.results;
    assert_eq!(r["fp32"].passed, Some(true));
    assert_eq!(r["int8"].passed, Some(true), "{:?}", r["int8"]);
    assert_eq!(r["int8-damaged"].passed, Some(false));
    assert!(r["int8-damaged"].value.expect("v") < 0.5);
    assert_eq!(report.failed(), ["int8-damaged"]);
    let v = &report.variants[0];
    assert_eq!(v.batch, Some(8));
    let digest = ferry_shared::Sha256Digest::of(
        &std::fs::read(dir().join("digits-test.safetensors")).expect("set"),
    );
    assert_eq!(report.evaluation.dataset_sha256, digest.to_hex());
    assert_eq!(report.evaluation.runtime_version, "1.5.1");
}

#[test]
fn agreement_and_max_abs_error_compare_with_the_reference_outputs() {
    let report = evaluate(
        &release(Metric::Agreement, Some(0.02), None),
        &dir(),
        &mut |_, _| {},
    )
    .expect("evaluates");
    let want = eager();
    let r = &report.evaluation.results;
    assert_eq!(r["fp32"].value, Some(1.0));
    let int8 = r["int8"].value.expect("v");
    let eager_int8 = want["eager_agreement"]["digits-int8"]
        .as_f64()
        .expect("eager");
    assert!((int8 - eager_int8).abs() <= 0.01, "{int8} vs {eager_int8}");
    assert_eq!(r["int8-damaged"].passed, Some(false));

    let report = evaluate(
        &release(Metric::MaxAbsError, None, Some(1e-6)),
        &dir(),
        &mut |_, _| {},
    )
    .expect("evaluates");
    let r = &report.evaluation.results;
    assert_eq!(r["fp32"].value, Some(0.0));
    assert_eq!(r["fp32"].passed, Some(true));
    // Quantisation moves the logits by far more than 1e-6.
    assert_eq!(r["int8"].passed, Some(false));
}

#[test]
fn a_variant_this_machine_cannot_run_is_listed_and_a_bad_set_is_a_clear_error() {
    let mut spec = release(Metric::Top1, Some(0.01), None);
    let pte = ferry_tests::fixtures_dir().join("pte");
    spec.variants.push(variant(
        "coreml",
        pte.join("mlp-v1-coreml.pte").to_str().expect("path"),
        Delegate::Coreml,
        ">=1.0.0",
        "*",
    ));
    let report = evaluate(&spec, &dir(), &mut |_, _| {}).expect("evaluates");
    let c = &report.evaluation.results["coreml"];
    assert!(!c.evaluated);
    assert_eq!(c.passed, None);
    assert!(
        c.why_not.as_deref().expect("why").contains("CoreMLBackend"),
        "{c:?}"
    );

    // A truncated set, and a file that is not one, are refused with the reason.
    let work = tempfile::tempdir().expect("tmp");
    for f in [
        "digits-fp32.pte",
        "digits-int8.pte",
        "digits-int8-damaged.pte",
    ] {
        std::fs::copy(dir().join(f), work.path().join(f)).expect("copy");
    }
    let set = std::fs::read(dir().join("digits-test.safetensors")).expect("set");
    let target = work.path().join("digits-test.safetensors");
    for (bytes, says) in [
        (&set[..set.len() - 10], "bytes, its header describes"),
        (&set[..4], "too short"),
        (
            &b"\xff\xff\xff\xff\xff\xff\xff\x7fjunk"[..],
            "not a .safetensors file",
        ),
    ] {
        std::fs::write(&target, bytes).expect("write");
        let e = evaluate(
            &release(Metric::Top1, Some(0.01), None),
            work.path(),
            &mut |_, _| {},
        )
        .expect_err("a bad set");
        assert!(format!("{e:#}").contains(says), "{e:#}");
    }
}
