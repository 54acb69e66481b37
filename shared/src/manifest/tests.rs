use super::*;

pub(crate) fn sample() -> ReleaseManifest {
    let json = r#"{
            "model": "demo-mlp",
            "version": "1.0.0",
            "notes": "first",
            "created": "2026-12-01T10:00:00Z",
            "variants": [
              {"id": "xnnpack-fp32", "delegate": "xnnpack", "backends": ["XnnpackBackend"],
               "quant": "fp32", "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
               "size": 1234, "runtime": ">=1.5.0, <2", "app": ">=1.0.0"},
              {"id": "portable", "delegate": "portable", "quant": "fp32",
               "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
               "size": 99, "runtime": ">=1.0.0", "app": "*",
               "constraints": {"platforms": ["android", "linux"], "min_ram_mb": 512}}
            ]
        }"#;
    ReleaseManifest::from_json(json.as_bytes()).expect("sample parses")
}

#[test]
fn round_trip() {
    let m = sample();
    let again = ReleaseManifest::from_json_strict(&m.to_json()).expect("round trip");
    assert_eq!(m, again);
    assert_eq!(m.variants[1].constraints.min_ram_mb, Some(512));
}

#[test]
fn goldens_of_other_methods_are_checked_like_forwards() {
    let t = |n: usize| TensorValue {
        dtype: "float32".into(),
        shape: vec![n as u64],
        data: vec![0.0; n],
    };
    let with = |methods: Vec<(&str, usize)>| {
        let mut m = sample();
        m.variants[0].golden = Some(Golden {
            input: vec![t(4)],
            output: vec![t(4)],
            atol: 1e-5,
            methods: methods
                .into_iter()
                .map(|(name, n)| {
                    (
                        name.to_string(),
                        MethodGolden {
                            input: vec![t(n)],
                            output: vec![t(n)],
                        },
                    )
                })
                .collect(),
        });
        m
    };
    let limits = ManifestLimits::default();
    let ok = with(vec![("encode", 4)]);
    ok.validate(&limits).expect("a second method's golden");
    let again = ReleaseManifest::from_json_strict(&ok.to_json()).expect("round trip");
    assert_eq!(
        again.variants[0]
            .golden
            .as_ref()
            .and_then(|g| g.for_method("encode")),
        Some((&[t(4)][..], &[t(4)][..]))
    );
    let err = |m: ReleaseManifest| m.validate(&limits).expect_err("refused").to_string();
    assert!(err(with(vec![("forward", 4)])).contains("other than forward"));
    assert!(err(with(vec![("", 4)])).contains("other than forward"));
    let many: Vec<(String, usize)> = (0..17).map(|i| (format!("m{i}"), 1)).collect();
    let many = with(many.iter().map(|(n, k)| (n.as_str(), *k)).collect());
    assert!(err(many).contains("at most 16"));
    // Their elements count toward the variant's limit.
    let big = with(vec![("encode", limits.max_golden_elements / 2)]);
    assert!(err(big).contains("elements"));
    // A method golden whose shape does not match its data.
    let mut odd = with(vec![("encode", 4)]);
    if let Some(g) = odd.variants[0].golden.as_mut() {
        g.methods.get_mut("encode").expect("encode").input[0].shape = vec![5];
    }
    assert!(err(odd).contains("has 4 elements"));
}

#[test]
fn strict_refuses_unknown_fields() {
    let mut v: serde_json::Value = serde_json::from_slice(&sample().to_json()).expect("json");
    v["variants"][0]["surprise"] = serde_json::json!(1);
    let bytes = serde_json::to_vec(&v).expect("json");
    assert!(
        ReleaseManifest::from_json(&bytes).is_ok(),
        "lenient accepts"
    );
    let err = ReleaseManifest::from_json_strict(&bytes).expect_err("strict refuses");
    assert_eq!(err.code().as_str(), "manifest_unknown_field");
    assert!(err.to_string().contains("variants[0].surprise"), "{err}");
}

#[test]
fn rules() {
    let base = sample();
    let check = |f: &dyn Fn(&mut ReleaseManifest), needle: &str| {
        let mut m = base.clone();
        f(&mut m);
        let err = m
            .validate(&ManifestLimits::default())
            .expect_err("must be refused");
        assert!(err.to_string().contains(needle), "{err} lacks {needle}");
    };
    check(&|m| m.variants.clear(), "at least one variant");
    check(
        &|m| {
            let v = m.variants[0].clone();
            m.variants.push(v)
        },
        "duplicate variant id",
    );
    check(
        &|m| m.variants[0].backends.clear(),
        "needs backend XnnpackBackend",
    );
    check(
        &|m| m.variants[1].backends = vec![BackendId::new("XnnpackBackend").expect("id")],
        "portable variant calls no backend",
    );
    check(&|m| m.variants[0].size = 0, "size 0");
    check(&|m| m.notes = "x".repeat(20_000), "notes are");
    check(
        &|m| m.variants[0].constraints.min_os_version = Some("14.a".into()),
        "dotted numbers",
    );
    check(
        &|m| m.variants[0].quant = "a\nb".into(),
        "control characters",
    );
}

#[test]
fn malformed_inputs_are_errors() {
    for bad in [
        &b""[..],
        b"{",
        b"[]",
        b"null",
        b"{\"model\": \"../x\"}",
        b"{\"model\":\"a\",\"version\":\"1\",\"created\":\"x\",\"variants\":[]}",
    ] {
        assert!(ReleaseManifest::from_json(bad).is_err());
    }
    let huge_version = format!(
        "{{\"model\":\"a\",\"version\":\"1.0.0-{}\",\"created\":\"2026-01-01T00:00:00Z\",\"variants\":[]}}",
        "a".repeat(100_000)
    );
    assert!(ReleaseManifest::from_json(huge_version.as_bytes()).is_err());
}

#[test]
fn dotted_compare() {
    use std::cmp::Ordering::*;
    assert_eq!(compare_dotted("14.2", "14.10"), Less);
    assert_eq!(compare_dotted("14", "14.0.0"), Equal);
    assert_eq!(compare_dotted("15.0.1", "15"), Greater);
}

#[test]
fn delegates_map_to_backends() {
    for d in Delegate::ALL {
        if let Some(id) = d.backend_id() {
            assert_eq!(Delegate::from_backend_id(id), Some(d.clone()));
        }
        assert_eq!(d.as_str().parse::<Delegate>(), Ok(d));
    }
    // Any well-formed backend id is a delegate (protocol v1: the set is open).
    assert_eq!(
        "CudaBackend".parse::<Delegate>().map(|d| d.is_known()),
        Ok(false)
    );
    assert!("cu da".parse::<Delegate>().is_err());
    assert!("cuda".parse::<Delegate>().is_err(), "a misspelt known name");
}
