//! The inspector against ground truth recorded from the real exporter.
//!
//! `tests/fixtures/export.py` read each program's methods, delegates and instructions from the
//! exporter's own program object before serialisation; here the inspector reads the serialised
//! bytes and must agree on every count.

use ferry_shared::{Sha256Digest, pte};
use ferry_tests::pte_fixtures;

#[test]
fn inspector_matches_the_exporter_on_every_fixture() {
    let fixtures = pte_fixtures();
    assert!(fixtures.len() >= 10, "expected the committed fixture set");
    for f in &fixtures {
        let bytes = std::fs::read(&f.pte).expect("read fixture");
        let side = &f.sidecar;
        assert_eq!(bytes.len() as u64, side.size, "{}", side.name);
        assert_eq!(
            Sha256Digest::of(&bytes).to_hex(),
            side.sha256,
            "{}",
            side.name
        );

        let report = pte::inspect(&bytes).unwrap_or_else(|e| panic!("{}: {e}", side.name));
        assert_eq!(
            report.schema_version, side.expected.schema_version,
            "{}",
            side.name
        );
        assert_eq!(
            report.methods.len(),
            side.expected.methods.len(),
            "{}: method count",
            side.name
        );
        for (got, want) in report.methods.iter().zip(&side.expected.methods) {
            let ctx = format!("{} / {}", side.name, want.name);
            assert_eq!(got.name, want.name, "{ctx}");
            assert_eq!(got.inputs, want.inputs, "{ctx}: inputs");
            assert_eq!(got.outputs, want.outputs, "{ctx}: outputs");
            assert_eq!(got.values, want.values, "{ctx}: values");
            assert_eq!(got.instructions, want.instructions, "{ctx}: instructions");
            assert_eq!(got.operators, want.operators, "{ctx}: operators");
            let backends: Vec<&str> = got.delegates.iter().map(|d| d.backend.as_str()).collect();
            assert_eq!(backends, want.delegates, "{ctx}: delegates");
            assert_eq!(
                got.delegate_calls, want.delegate_calls,
                "{ctx}: delegate calls"
            );
            assert_eq!(got.kernel_calls, want.kernel_calls, "{ctx}: kernel calls");
            assert_eq!(
                got.other_instructions, want.other_instructions,
                "{ctx}: other"
            );
        }
    }
}

#[test]
fn declared_delegates_are_in_the_bytes() {
    // The property publishing relies on: a fixture exported for delegate D calls D's backend.
    for f in pte_fixtures() {
        let bytes = std::fs::read(&f.pte).expect("read fixture");
        let report = pte::inspect(&bytes).expect("valid");
        let delegate: ferry_shared::manifest::Delegate =
            f.sidecar.delegate.parse().expect("known delegate");
        match delegate.backend_id() {
            Some(id) => assert!(
                report.backends().iter().any(|b| b == id),
                "{} claims {id} but calls {:?}",
                f.sidecar.name,
                report.backends()
            ),
            None => assert!(report.backends().is_empty(), "{}", f.sidecar.name),
        }
    }
}

#[test]
fn a_program_with_its_weights_in_a_ptd_is_inspected_and_names_them() {
    let fixtures = pte_fixtures();
    let f = fixtures
        .iter()
        .find(|f| f.sidecar.name == "mlp-external-portable")
        .expect("the external-weights fixture");
    let bytes = std::fs::read(&f.pte).expect("read");
    // The exporter leaves one empty segment and no extended header in such a program.
    let report = pte::inspect(&bytes).expect("a valid program with external weights");
    let want = &f.sidecar.external_tensors;
    assert_eq!(want["forward"].len(), 4, "{want:?}");
    for m in &report.methods {
        assert_eq!(&m.external_tensors, &want[&m.name], "{}", m.name);
    }
    assert!(
        report
            .to_text()
            .contains("4 tensors in a separate data file (.ptd)")
    );
    // The data file the exporter wrote provides exactly those names.
    let ptd = std::fs::read(f.pte.with_extension("ptd")).expect("the .ptd");
    let data = pte::inspect_ptd(&ptd).expect("a valid .ptd");
    assert_eq!(data.keys(), want["forward"]);
    // Programs with weights inside list none.
    for other in fixtures
        .iter()
        .filter(|f| f.sidecar.external_tensors.is_empty())
    {
        let r = pte::inspect(&std::fs::read(&other.pte).expect("read")).expect("inspects");
        assert!(
            r.methods.iter().all(|m| m.external_tensors.is_empty()),
            "{}",
            other.sidecar.name
        );
    }
}

#[test]
fn the_inspector_reads_each_methods_input_and_output_contract() {
    // Against the exporter's own example inputs and eager outputs: every program exported with
    // a golden declares `forward`'s inputs with the example's dtype and shape (a bounded
    // dimension at its upper bound, and at least the example's size), and as many outputs.
    let mut bounded = 0;
    for f in pte_fixtures()
        .iter()
        .filter(|f| !f.sidecar.output.is_empty())
    {
        let name = &f.sidecar.name;
        let report = pte::inspect(&std::fs::read(&f.pte).expect("read")).expect("inspects");
        let forward = report
            .methods
            .iter()
            .find(|m| m.name == "forward")
            .expect("forward");
        let sig = &forward.signature;
        assert_eq!(sig.inputs.len(), f.sidecar.input.len(), "{name}");
        assert_eq!(sig.outputs.len(), f.sidecar.output.len(), "{name}");
        for (i, (got, want)) in sig.inputs.iter().zip(&f.sidecar.input).enumerate() {
            assert_eq!(got.dtype, want.dtype, "{name} input {i}");
            assert_eq!(got.shape.len(), want.shape.len(), "{name} input {i}");
            let contiguous: Vec<u8> = (0..got.shape.len() as u8).collect();
            assert_eq!(got.dim_order, contiguous, "{name} input {i}");
            match got.dynamism {
                pte::Dynamism::Static => {
                    let want: Vec<i64> = want.shape.iter().map(|d| *d as i64).collect();
                    assert_eq!(got.shape, want, "{name} input {i}");
                }
                pte::Dynamism::Bounded => {
                    bounded += 1;
                    for (g, w) in got.shape.iter().zip(&want.shape) {
                        assert!(*g >= *w as i64, "{name} input {i}: {:?}", got.shape);
                    }
                }
                pte::Dynamism::Unbounded | pte::Dynamism::Other => {
                    panic!("{name} input {i}: {:?}", got.dynamism)
                }
            }
        }
        for (i, (got, want)) in sig.outputs.iter().zip(&f.sidecar.output).enumerate() {
            assert_eq!(got.dtype, want.dtype, "{name} output {i}");
        }
    }
    // The dynamic-batch program (`Dim("batch", min=1, max=8)` in export.py) is bounded, with
    // the batch at its upper bound.
    assert_eq!(bounded, 1);
    let dynamic = pte_fixtures()
        .into_iter()
        .find(|f| f.sidecar.name == "dynamic-xnnpack")
        .expect("dynamic fixture");
    let report = pte::inspect(&std::fs::read(&dynamic.pte).expect("read")).expect("inspects");
    let input = &report.methods[0].signature.inputs[0];
    assert_eq!(input.dynamism, pte::Dynamism::Bounded);
    assert_eq!(input.shape[0], 8);
    assert!(report.to_text().contains("input 0: float32[<=8, <=16]"));
}

#[test]
fn signing_records_each_methods_contract_and_warns_on_unbounded_or_permuted_inputs() {
    use ferry_server::release::sign::{build_manifest, contract_warnings};
    let spec = ferry_tests::releases::release(
        "dynamic",
        "1.0.0",
        vec![ferry_tests::app::variant(
            "only",
            "dynamic-xnnpack.pte",
            ferry_shared::manifest::Delegate::Xnnpack,
            ">=1.0.0",
            "*",
        )],
    );
    let base = ferry_tests::fixtures_dir().join("pte");
    let read = |p: &std::path::Path| Ok(std::fs::read(p)?);
    let (mut manifest, _) =
        build_manifest(&spec, &base, &read, time::OffsetDateTime::now_utc()).expect("manifest");
    let methods = manifest.variants[0].methods.clone().expect("methods");
    let report = pte::inspect(&std::fs::read(base.join("dynamic-xnnpack.pte")).expect("pte"))
        .expect("inspect");
    assert_eq!(methods["forward"], report.methods[0].signature);
    // A bounded, contiguous input: nothing to warn about.
    assert_eq!(contract_warnings(&manifest), Vec::<String>::new());

    // The same contract as an unbounded, channels-last-style input draws both warnings.
    let input = &mut manifest.variants[0]
        .methods
        .as_mut()
        .expect("methods")
        .get_mut("forward")
        .expect("forward")
        .inputs[0];
    input.dynamism = pte::Dynamism::Unbounded;
    input.dim_order = vec![1, 0];
    let warnings = contract_warnings(&manifest);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("variant only forward input 0: unbounded sizes"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("dim order [1, 0] is not contiguous"),
        "{warnings:?}"
    );
}
