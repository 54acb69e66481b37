//! Tensors of every element type ExecuTorch programs use, several inputs and outputs, and
//! methods by name, through the real client and the real ExecuTorch runtime, against the
//! outputs of the exporter's eager PyTorch model (the fixtures' sidecars).

use std::path::Path;

use ferry_client::{Client, LoadedModel, max_abs_diff};
use ferry_shared::manifest::{Delegate, TensorValue};
use ferry_tests::app::{TestApp, variant};
use ferry_tests::kit::device;

/// The fixture's sidecar: `input`, `output`, `atol` and, for other methods, `methods.NAME`.
fn sidecar(name: &str) -> serde_json::Value {
    let path = ferry_tests::fixtures_dir()
        .join("pte")
        .join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(path).expect("sidecar")).expect("json")
}

fn tensors(v: &serde_json::Value) -> Vec<TensorValue> {
    serde_json::from_value(v.clone()).expect("tensors")
}

fn client(app: &TestApp, cache: &Path, method: &str) -> Client {
    app.client(cache).method(method).build().expect("client")
}

/// Publishes fixture `file` as the only (portable) variant of `model` 1.0.0.
fn publish(app: &TestApp, model: &str, file: &str, delegate: Delegate) {
    let spec = ferry_tests::releases::release(
        model,
        "1.0.0",
        vec![variant("only", file, delegate, ">=1.0.0", "*")],
    );
    app.publish(&spec);
}

fn load(app: &TestApp, cache: &Path, model: &str, method: &str) -> LoadedModel {
    client(app, cache, method)
        .load(model, &device("tensor-device"))
        .unwrap_or_else(|e| panic!("{model} loads: {e}"))
}

/// Each output has the sidecar's element type and shape, and its values are within `atol`.
fn assert_matches(got: &[TensorValue], want: &[TensorValue], atol: f64) {
    let kinds = |ts: &[TensorValue]| -> Vec<(String, Vec<u64>)> {
        ts.iter()
            .map(|t| (t.dtype.clone(), t.shape.clone()))
            .collect()
    };
    assert_eq!(kinds(got), kinds(want));
    let diff = max_abs_diff(got, want).expect("same types and shapes");
    assert!(diff <= atol, "max |diff| {diff} > {atol}");
}

#[test]
fn integer_inputs_and_outputs_of_three_types_match_the_exporter() {
    let app = TestApp::start();
    publish(
        &app,
        "typed-io",
        "typed-io-portable.pte",
        Delegate::Portable,
    );
    let cache = tempfile::tempdir().expect("tmp");
    let mut loaded = load(&app, cache.path(), "typed-io", "forward");
    let side = sidecar("typed-io-portable");
    let input = tensors(&side["input"]);
    let want = tensors(&side["output"]);
    // The exporter's own types: int64 ids and int8 flags in; float32, int64, bool out.
    let dtypes = |ts: &[TensorValue]| ts.iter().map(|t| t.dtype.clone()).collect::<Vec<_>>();
    assert_eq!(dtypes(&input), ["int64", "int8"]);
    assert_eq!(dtypes(&want), ["float32", "int64", "bool"]);
    // The best classes are not all zero: a zeroed or misread int64 output cannot match.
    assert!(want[1].data.iter().any(|v| *v != 0.0), "{:?}", want[1]);

    let got = loaded.run(&input).expect("forward runs");
    assert_matches(&got, &want, side["atol"].as_f64().expect("atol"));

    // The signature comes from the program's metadata and agrees with the exporter.
    let sig = loaded.signature("forward").expect("signature");
    let specs = |ts: &[ferry_client::TensorSpec]| -> Vec<(String, Vec<u64>)> {
        ts.iter()
            .map(|t| (t.dtype.clone(), t.shape.clone()))
            .collect()
    };
    let shapes = |ts: &[TensorValue]| -> Vec<(String, Vec<u64>)> {
        ts.iter()
            .map(|t| (t.dtype.clone(), t.shape.clone()))
            .collect()
    };
    assert_eq!(specs(&sig.inputs), shapes(&input));
    assert_eq!(specs(&sig.outputs), shapes(&want));
}

#[test]
fn inputs_of_the_wrong_type_count_or_value_are_refused_with_the_reason() {
    let app = TestApp::start();
    publish(
        &app,
        "typed-io",
        "typed-io-portable.pte",
        Delegate::Portable,
    );
    let cache = tempfile::tempdir().expect("tmp");
    let mut loaded = load(&app, cache.path(), "typed-io", "forward");
    let good = tensors(&sidecar("typed-io-portable")["input"]);

    let mut as_float = good.clone();
    as_float[0].dtype = "float32".into();
    let e = loaded.run(&as_float).expect_err("float ids");
    assert_eq!(e.code.as_str(), "input_mismatch", "{e}");
    assert!(
        e.message
            .contains("input 0: element type float32, the program takes int64"),
        "{e}"
    );

    let e = loaded.run(&good[..1]).expect_err("one input");
    assert_eq!(e.code.as_str(), "invalid_argument", "{e}");
    assert!(e.message.contains("takes 2 inputs, 1 were given"), "{e}");

    let mut fraction = good.clone();
    fraction[0].data[0] = 2.5;
    let e = loaded.run(&fraction).expect_err("fraction");
    assert!(e.message.contains("2.5 is not a valid int64"), "{e}");

    let mut out_of_range = good.clone();
    out_of_range[1].data[0] = 300.0;
    let e = loaded.run(&out_of_range).expect_err("300 as int8");
    assert!(e.message.contains("300 is not a valid int8"), "{e}");

    let mut short = good.clone();
    short[0].data.pop();
    let e = loaded.run(&short).expect_err("short data");
    assert!(
        e.message.contains("holds 12 elements, the data has 11"),
        "{e}"
    );

    let mut nan = good.clone();
    nan[0].data[0] = f64::NAN;
    let e = loaded.run(&nan).expect_err("NaN id");
    assert!(e.message.contains("NaN is not a valid int64"), "{e}");

    // 2^53 + 1 cannot be told apart from 2^53 as an f64: both are refused.
    let mut huge = good.clone();
    huge[0].data[0] = 9_007_199_254_740_992.0;
    let e = loaded.run(&huge).expect_err("2^53");
    assert!(e.message.contains("is not a valid int64"), "{e}");

    // Shapes the runtime's 32-bit strides cannot hold are refused, even with no elements.
    let mut empty_but_wide = good.clone();
    empty_but_wide[0].shape = vec![0, 65_536, 65_536];
    empty_but_wide[0].data.clear();
    let e = loaded.run(&empty_but_wide).expect_err("wide");
    assert_eq!(e.code.as_str(), "input_mismatch", "{e}");
    assert!(e.message.contains("input 0: 3 dimensions"), "{e}");
    let mut deep = good.clone();
    deep[0].shape = vec![1; 17];
    deep[0].data = vec![1.0];
    let e = loaded.run(&deep).expect_err("17 dimensions");
    assert!(e.message.contains("17 dimensions"), "{e}");

    // After all that the method still runs.
    loaded.run(&good).expect("still runs");
}

#[test]
fn half_precision_and_byte_tensors_match_the_exporter() {
    let app = TestApp::start();
    publish(&app, "half-io", "half-io-portable.pte", Delegate::Portable);
    let cache = tempfile::tempdir().expect("tmp");
    let mut loaded = load(&app, cache.path(), "half-io", "forward");
    let side = sidecar("half-io-portable");
    let input = tensors(&side["input"]);
    let want = tensors(&side["output"]);
    let dtypes = |ts: &[TensorValue]| ts.iter().map(|t| t.dtype.clone()).collect::<Vec<_>>();
    assert_eq!(dtypes(&input), ["float16", "bfloat16", "uint8"]);
    assert_eq!(dtypes(&want), ["float16", "bfloat16", "int32"]);
    let got = loaded.run(&input).expect("forward runs");
    assert_matches(&got, &want, side["atol"].as_f64().expect("atol"));

    // A finite value beyond float16's range is refused, not sent as infinity.
    let mut overflow = input.clone();
    overflow[0].data[0] = 70_000.0;
    let e = loaded.run(&overflow).expect_err("70000 as float16");
    assert!(e.message.contains("out of the range of float16"), "{e}");
}

#[test]
fn a_second_method_runs_by_name_and_a_client_can_load_it_first() {
    let app = TestApp::start();
    publish(&app, "two-methods", "two-methods.pte", Delegate::Xnnpack);
    let side = sidecar("two-methods");
    let atol = side["atol"].as_f64().expect("atol");
    let encode_in = tensors(&side["methods"]["encode"]["input"]);
    let encode_out = tensors(&side["methods"]["encode"]["output"]);

    let cache = tempfile::tempdir().expect("tmp");
    let mut loaded = load(&app, cache.path(), "two-methods", "forward");
    let forward = loaded.run(&tensors(&side["input"])).expect("forward runs");
    assert_matches(&forward, &tensors(&side["output"]), atol);
    let encoded = loaded
        .run_method("encode", &encode_in)
        .expect("encode runs");
    assert_matches(&encoded, &encode_out, atol);
    // The two methods differ: encode's output is not forward's for the same input.
    let forward_on_encode_input = loaded.run(&encode_in).expect("forward");
    let apart = max_abs_diff(&forward_on_encode_input, &encode_out);
    assert!(apart.is_none_or(|d| d > 1e-3), "{apart:?}");
    let e = loaded
        .run_method("nosuch", &encode_in)
        .expect_err("no such method");
    assert!(e.message.contains("nosuch"), "{e}");

    // A client configured for `encode` loads that method and runs it with `run`.
    let cache = tempfile::tempdir().expect("tmp");
    let mut loaded = load(&app, cache.path(), "two-methods", "encode");
    assert_eq!(loaded.method, "encode");
    assert_matches(&loaded.run(&encode_in).expect("encode"), &encode_out, atol);
}

#[test]
fn each_methods_signed_golden_is_checked_when_that_method_is_loaded() {
    let app = TestApp::start();
    // Signed with the exporter's sidecar as golden: forward's input and output, and encode's
    // under `methods`.
    let mut v = variant("only", "two-methods.pte", Delegate::Xnnpack, ">=1.0.0", "*");
    v.golden = Some("two-methods.json".into());
    let spec = ferry_tests::releases::release("two-methods", "1.0.0", vec![v]);
    let (manifest, _) = app.publish(&spec);
    let golden = manifest.variants[0].golden.clone().expect("golden");
    assert_eq!(golden.methods.keys().collect::<Vec<_>>(), ["encode"]);
    let side = sidecar("two-methods");
    let encode_in = tensors(&side["methods"]["encode"]["input"]);

    // Both goldens pass: loading forward checks forward's; encode's runs on its first load.
    let cache = tempfile::tempdir().expect("tmp");
    let mut loaded = load(&app, cache.path(), "two-methods", "forward");
    assert!(loaded.golden_max_abs_diff.is_some());
    loaded
        .run_method("encode", &encode_in)
        .expect("encode passes its golden");
    let cache = tempfile::tempdir().expect("tmp");
    let loaded = load(&app, cache.path(), "two-methods", "encode");
    assert!(
        loaded.golden_max_abs_diff.is_some(),
        "a client loading encode checks encode's golden"
    );

    // Release 2.0.0 (the same program) with encode's expected output moved past atol.
    let mut bad = manifest.clone();
    bad.version = semver::Version::new(2, 0, 0);
    let g = bad.variants[0].golden.as_mut().expect("golden");
    let out = &mut g.methods.get_mut("encode").expect("encode").output[0];
    out.data[0] += 1.0;
    let (status, body) = app.post_release(
        "two-methods",
        &ferry_tests::app::sign_manifest(&bad, &app.release_key()),
    );
    assert_eq!(status, 201, "{body}");
    app.ship_model("two-methods", "2.0.0");
    // Forward's golden still passes, so a forward client loads 2.0.0 ...
    let cache = tempfile::tempdir().expect("tmp");
    let mut loaded = load(&app, cache.path(), "two-methods", "forward");
    assert_eq!(loaded.release, "2.0.0");
    // ... and encode is refused on its first load, with the reason, and again on the next call.
    for _ in 0..2 {
        let e = loaded
            .run_method("encode", &encode_in)
            .expect_err("encode's golden fails");
        assert_eq!(e.code.as_str(), "golden_mismatch", "{e}");
        assert!(e.message.contains("golden check of encode"), "{e}");
    }
    // A client loading encode first refuses 2.0.0 at the golden stage.
    let cache = tempfile::tempdir().expect("tmp");
    let e = client(&app, cache.path(), "encode")
        .load("two-methods", &device("tensor-device"))
        .expect_err("encode's golden fails at load");
    let ferry_client::ClientError::AllCandidatesFailed { attempts } = &e else {
        panic!("{e}");
    };
    assert_eq!(
        attempts[0].stage,
        ferry_client::Stage::Golden,
        "{attempts:?}"
    );
    assert_eq!(attempts[0].error_code, "golden_mismatch", "{attempts:?}");
}

#[test]
fn the_load_report_lists_the_operators_left_on_portable_kernels() {
    let app = TestApp::start();
    publish(&app, "partial", "partial-xnnpack.pte", Delegate::Xnnpack);
    let cache = tempfile::tempdir().expect("tmp");
    let loaded = load(&app, cache.path(), "partial", "forward");
    let truth = &sidecar("partial-xnnpack")["expected"]["methods"][0];
    // The exporter's own account: two XNNPACK calls, cumsum on portable kernels.
    assert_eq!(truth["kernel_calls"]["aten::cumsum.out"], 1);
    let r = &loaded.report;
    assert_eq!(
        serde_json::to_value(&r.portable_kernels).expect("json"),
        truth["kernel_calls"]
    );
    assert_eq!(
        serde_json::to_value(&r.delegated).expect("json"),
        truth["delegate_calls"]
    );
    assert_eq!(
        (r.method.as_str(), r.source.as_str()),
        ("forward", "downloaded")
    );
    assert!(r.duration_ms > 0.0);
}

#[test]
fn an_input_outside_the_signed_contract_is_refused_before_the_runtime() {
    // The exporter declared the batch dimension dynamic with max=8; the example batch is 5.
    let app = TestApp::start();
    publish(&app, "dynamic", "dynamic-xnnpack.pte", Delegate::Xnnpack);
    let cache = tempfile::tempdir().expect("tmp");
    let mut loaded = load(&app, cache.path(), "dynamic", "forward");
    let side = sidecar("dynamic-xnnpack");
    let good = tensors(&side["input"]);
    let atol = side["atol"].as_f64().expect("atol");

    // The contract reached the app through the signed manifest, as the inspector read it.
    let contract = loaded.contract("forward").expect("signed contract").clone();
    let report = ferry_shared::pte::inspect(
        &std::fs::read(ferry_tests::fixtures_dir().join("pte/dynamic-xnnpack.pte")).expect("pte"),
    )
    .expect("inspect");
    assert_eq!(contract, report.methods[0].signature);
    assert_eq!(contract.inputs[0].describe(), "float32[<=8, <=16]");

    // In bounds (the example batch, then the bound itself) it runs.
    assert_matches(
        &loaded.run(&good).expect("batch 5"),
        &tensors(&side["output"]),
        atol,
    );
    let batch = |n: u64| TensorValue {
        dtype: "float32".into(),
        shape: vec![n, 16],
        data: (0..n * 16).map(|i| (i % 7) as f64 / 7.0).collect(),
    };
    let out = loaded.run(&[batch(8)]).expect("batch 8");
    assert_eq!(out[0].shape, [8, 8]);

    // Past the bound, another element type or rank: input_mismatch, naming what is wrong.
    let e = loaded.run(&[batch(9)]).expect_err("batch 9");
    assert_eq!(e.code.as_str(), "input_mismatch", "{e}");
    assert!(
        e.message
            .contains("input 0 dimension 0: size 9 is above the bound 8"),
        "{e}"
    );
    let mut ints = batch(2);
    ints.dtype = "int64".into();
    let e = loaded.run(&[ints]).expect_err("int64");
    assert_eq!(e.code.as_str(), "input_mismatch", "{e}");
    assert!(
        e.message
            .contains("element type int64, the program takes float32"),
        "{e}"
    );
    let mut flat = batch(2);
    flat.shape = vec![32];
    let e = loaded.run(&[flat]).expect_err("rank 1");
    assert_eq!(e.code.as_str(), "input_mismatch", "{e}");
    assert!(
        e.message
            .contains("input 0: 1 dimensions [32], the program takes 2"),
        "{e}"
    );
    // A missing input is invalid_argument.
    let e = loaded.run(&[]).expect_err("no input");
    assert_eq!(e.code.as_str(), "invalid_argument", "{e}");
    assert!(
        e.message.contains("forward takes 1 inputs, 0 were given"),
        "{e}"
    );

    // Refusals leave the method usable.
    loaded.run(&[batch(3)]).expect("batch 3 after refusals");
}
