use super::*;
use crate::names::{BackendId, Sha256Digest};

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

#[test]
fn metadata_round_trips_and_its_values_are_checked() {
    let digest: Sha256Digest = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        .parse()
        .expect("digest");
    let mut m = sample();
    m.variants[0].assets = vec![ExtraFile {
        name: "labels.txt".into(),
        sha256: digest,
        size: 40,
        chunk_index: None,
    }];
    m.variants[0].labels = Some("labels.txt".into());
    m.variants[0].preprocess = Some(Preprocess {
        resize: Some(Resize {
            width: 224,
            height: 224,
            filter: Some(ResizeFilter::Bilinear),
        }),
        color: Some(ColorOrder::Rgb),
        layout: Some(Layout::Nchw),
        range: Some([0.0, 1.0]),
        mean: vec![0.485, 0.456, 0.406],
        std: vec![0.229, 0.224, 0.225],
    });
    let again = ReleaseManifest::from_json_strict(&m.to_json()).expect("round trip");
    assert_eq!(again, m);
    let json = String::from_utf8(m.to_json()).expect("utf8");
    assert!(json.contains(r#""filter": "bilinear""#), "{json}");
    assert!(json.contains(r#""layout": "nchw""#), "{json}");

    let limits = ManifestLimits::default();
    let refused = |f: &dyn Fn(&mut Variant), why: &str| {
        let mut bad = m.clone();
        f(&mut bad.variants[0]);
        let e = bad.validate(&limits).expect_err(why).to_string();
        assert!(e.contains(why), "{e}");
    };
    refused(
        &|v| v.labels = Some("other.txt".into()),
        "not one of its assets",
    );
    refused(
        &|v| v.assets[0].size = MAX_LABELS_BYTES + 1,
        "the labels file labels.txt is",
    );
    refused(
        &|v| v.assets[0].name = "../labels.txt".into(),
        "not a plain name",
    );
    refused(
        &|v| v.assets[0].name = "labels\u{202e}txt.exe".into(),
        "only letters, digits",
    );
    refused(
        &|v| v.assets.push(v.assets[0].clone()),
        "two assets are named",
    );
    let pre = |f: &dyn Fn(&mut Preprocess), why: &str| {
        refused(&|v| f(v.preprocess.as_mut().expect("preprocess")), why);
    };
    pre(&|p| p.std[1] = 0.0, "std values must be at least");
    pre(&|p| p.std[1] = 1e-50, "std values must be at least");
    pre(&|p| p.mean[1] = 1e300, "beyond");
    pre(&|p| p.mean.push(0.5), "preprocess mean has 4 values");
    pre(&|p| p.range = Some([1.0, 0.0]), "low below high");
    pre(&|p| p.mean[0] = f64::NAN, "not finite");
    pre(
        &|p| p.resize.as_mut().expect("resize").width = 0,
        "outside 1..=65536",
    );
    // One value for every channel is fine.
    let mut one = m.clone();
    if let Some(p) = one.variants[0].preprocess.as_mut() {
        p.mean = vec![0.5];
        p.std = vec![0.5];
    }
    one.validate(&limits).expect("one value for all channels");
}

#[test]
fn a_reader_takes_preprocessing_values_it_does_not_know() {
    let mut v = serde_json::to_value(sample()).expect("json");
    v["variants"][0]["preprocess"] = serde_json::json!({
        "resize": {"width": 32, "height": 32, "filter": "mitchell", "antialias": true},
        "color": "yuv420",
        "layout": "nc4hw4",
        "gamma": 2.2
    });
    let m = ReleaseManifest::from_json(&serde_json::to_vec(&v).expect("json"))
        .expect("a newer signer's values are read");
    let p = m.variants[0].preprocess.as_ref().expect("preprocess");
    assert_eq!(p.color, Some(ColorOrder::Other));
    assert_eq!(p.layout, Some(Layout::Other));
    assert_eq!(
        p.resize.as_ref().and_then(|r| r.filter),
        Some(ResizeFilter::Other)
    );
    assert_eq!(p.unknown_values(), ["resize.filter", "color", "layout"]);
}

#[test]
fn a_latency_budget_is_a_positive_finite_number_of_milliseconds() {
    let limits = ManifestLimits::default();
    let mut m = sample();
    assert!(
        !String::from_utf8(m.to_json())
            .expect("utf8")
            .contains("latency_budget_ms"),
        "absent unless set: a manifest without it signs as before"
    );
    m.variants[0].latency_budget_ms = Some(16.5);
    m.validate(&limits).expect("a budget");
    let again = ReleaseManifest::from_json_strict(&m.to_json()).expect("round trip");
    assert_eq!(again.variants[0].latency_budget_ms, Some(16.5));
    for bad in [
        0.0,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        MAX_LATENCY_BUDGET_MS * 2.0,
    ] {
        m.variants[0].latency_budget_ms = Some(bad);
        let e = m.validate(&limits).expect_err("refused").to_string();
        assert!(
            e.contains("variant xnnpack-fp32: latency_budget_ms"),
            "{bad}: {e}"
        );
    }
}
