use super::*;

#[test]
fn the_sunset_is_a_plain_date() {
    let v = |t: &str| -> toml::Value {
        toml::from_str::<toml::Table>(&format!("d = {t}")).expect("toml")["d"].clone()
    };
    for good in [r#""2029-06-30""#, "2029-06-30"] {
        assert_eq!(sunset_date(&v(good)).expect(good).to_string(), "2029-06-30");
    }
    for bad in [
        r#""2029-13-01""#,
        r#""2029-06-30T00:00:00Z""#,
        "2029-06-30T10:00:00Z",
        r#""30.06.2029""#,
        "20290630",
    ] {
        let e = sunset_date(&v(bad)).expect_err(bad).to_string();
        assert!(e.contains("like 2029-06-30"), "{bad}: {e}");
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn defaults() {
    let c = Config::load(&Flags::default(), &no_env).expect("defaults");
    assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(c.data, PathBuf::from("./ferry-data"));
    assert!(c.tokens.is_empty());
    assert!(c.tls.is_none());
}

#[test]
fn precedence_file_env_flags() {
    let dir = std::env::temp_dir().join(format!("ferry-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("ferry.toml");
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:1\"\ndata = \"/from/file\"\nlog_format = \"json\"\n",
    )
    .expect("write");
    let flags = Flags {
        config: Some(path.clone()),
        ..Flags::default()
    };
    let c = Config::load(&flags, &no_env).expect("file");
    assert_eq!(c.listen.port(), 1);
    assert!(c.log_json);
    let env = |k: &str| (k == "FERRY_LISTEN").then(|| "127.0.0.1:2".to_string());
    assert_eq!(Config::load(&flags, &env).expect("env").listen.port(), 2);
    let flags = Flags {
        listen: Some("127.0.0.1:3".into()),
        ..flags
    };
    assert_eq!(Config::load(&flags, &env).expect("flag").listen.port(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn s3_storage_from_the_environment() {
    let env = |k: &str| match k {
        "FERRY_STORAGE" => Some("s3".to_string()),
        "FERRY_S3_BUCKET" => Some("models".to_string()),
        "FERRY_S3_ENDPOINT" => Some("http://127.0.0.1:5000".to_string()),
        "FERRY_S3_ALLOW_HTTP" => Some("1".to_string()),
        "FERRY_S3_ACCESS_KEY_ID" => Some("id".to_string()),
        "FERRY_S3_SECRET_ACCESS_KEY" => Some("secret".to_string()),
        _ => None,
    };
    let c = Config::load(&Flags::default(), &env).expect("s3 config");
    assert_eq!(
        c.storage,
        StorageConfig::S3 {
            bucket: "models".into(),
            endpoint: Some("http://127.0.0.1:5000".into()),
            region: "us-east-1".into(),
            allow_http: true,
            access_key_id: Some("id".into()),
            secret_access_key: Some("secret".into()),
        }
    );
    let no_bucket = |k: &str| (k == "FERRY_STORAGE").then(|| "s3".to_string());
    assert!(Config::load(&Flags::default(), &no_bucket).is_err());
    let unknown = |k: &str| (k == "FERRY_STORAGE").then(|| "ftp".to_string());
    assert!(Config::load(&Flags::default(), &unknown).is_err());
}

#[test]
fn azure_storage_from_the_environment_and_bad_names() {
    let with = |container: &'static str| {
        move |k: &str| match k {
            "FERRY_STORAGE" => Some("azure".to_string()),
            "FERRY_AZURE_CONTAINER" => Some(container.to_string()),
            "FERRY_AZURE_ACCOUNT" => Some("devstoreaccount1".to_string()),
            "FERRY_AZURE_ENDPOINT" => Some("http://127.0.0.1:10000/devstoreaccount1".to_string()),
            "FERRY_AZURE_ALLOW_HTTP" => Some("true".to_string()),
            "FERRY_AZURE_ACCESS_KEY" => Some("a2V5".to_string()),
            _ => None,
        }
    };
    let c = Config::load(&Flags::default(), &with("ferry-models")).expect("azure config");
    assert_eq!(
        c.storage,
        StorageConfig::Azure {
            container: "ferry-models".into(),
            account: "devstoreaccount1".into(),
            endpoint: Some("http://127.0.0.1:10000/devstoreaccount1".into()),
            allow_http: true,
            access_key: Some("a2V5".into()),
        }
    );
    for bad in ["Models", "ab", "-models", "models-", "mo--dels", "mo_dels"] {
        let err = Config::load(&Flags::default(), &with(bad)).expect_err(bad);
        assert!(err.to_string().contains("container"), "{bad}: {err}");
    }
    let no_container = |k: &str| (k == "FERRY_STORAGE").then(|| "azure".to_string());
    let err = Config::load(&Flags::default(), &no_container).expect_err("no container");
    assert!(err.to_string().contains("FERRY_AZURE_CONTAINER"), "{err}");
}

#[test]
fn telemetry_settings_and_plain_http_endpoints_are_checked() {
    let dir = std::env::temp_dir().join(format!("ferry-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (text, needle) in [
        ("[telemetry]\nflush_secs = 0\n", "telemetry.flush_secs"),
        (
            "[telemetry]\nraw_roll_secs = 18446744073709551615\n",
            "telemetry.raw_roll_secs",
        ),
        (
            "[telemetry]\nretention_days = 0\n",
            "telemetry.retention_days",
        ),
        (
            "[telemetry]\nraw_buffer_events = 0\n",
            "telemetry.raw_buffer_events",
        ),
        (
            "[storage]\nkind = \"azure\"\ncontainer = \"models\"\naccount = \"acct\"\nendpoint = \"http://127.0.0.1:10000/acct\"\n",
            "allow_http",
        ),
        (
            "[storage]\nkind = \"s3\"\nbucket = \"models\"\nendpoint = \"http://127.0.0.1:9000\"\n",
            "allow_http",
        ),
    ] {
        let path = dir.join("c.toml");
        std::fs::write(&path, text).expect("write");
        let flags = Flags {
            config: Some(path),
            ..Flags::default()
        };
        let err = Config::load(&flags, &no_env).expect_err(text);
        assert!(err.to_string().contains(needle), "{text}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_example_config_loads() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/ferry.example.toml");
    let flags = Flags {
        config: Some(path),
        ..Flags::default()
    };
    let c = Config::load(&flags, &no_env).expect("example config is valid");
    let defaults = Config::load(&Flags::default(), &no_env).expect("defaults");
    // Every value the example shows is the default: the two load to the same config.
    assert_eq!(format!("{c:?}"), format!("{defaults:?}"));
}

#[test]
fn bad_config_is_an_error_not_a_panic() {
    let dir = std::env::temp_dir().join(format!("ferry-config-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (i, text) in [
        "listen = 5",
        "surprise = true",
        "listen = \"not an address\"",
        "[limits]\nmax_json_bytes = 1",
        "log_format = \"xml\"",
        "node_id = \"Not Valid\"",
        "[[tokens]]\nname = \"x\"\nsha256 = \"short\"\nscopes = [\"publish\"]",
        "[[tokens]]\nname = \"x\"\nsha256 = \"aa\"\nscopes = [\"root\"]",
        "public_url = \"ftp://x\"",
        "this is not toml",
    ]
    .iter()
    .enumerate()
    {
        let path = dir.join(format!("c{i}.toml"));
        std::fs::write(&path, text).expect("write");
        let flags = Flags {
            config: Some(path),
            ..Flags::default()
        };
        assert!(
            Config::load(&flags, &no_env).is_err(),
            "{text:?} was accepted"
        );
    }
    let flags = Flags {
        config: Some(dir.join("missing.toml")),
        ..Flags::default()
    };
    assert!(Config::load(&flags, &no_env).is_err());
    let env = |k: &str| (k == "FERRY_ADMIN_TOKEN").then(|| "short".to_string());
    assert!(Config::load(&Flags::default(), &env).is_err());
    let env = |k: &str| (k == "FERRY_TLS_CERT").then(|| "x.pem".to_string());
    assert!(Config::load(&Flags::default(), &env).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The config of a file holding `text`, written in `dir`.
fn load_file(dir: &std::path::Path, text: &str) -> anyhow::Result<Config> {
    let path = dir.join("ferry.toml");
    std::fs::write(&path, text).expect("write");
    let flags = Flags {
        config: Some(path),
        ..Flags::default()
    };
    Config::load(&flags, &no_env)
}

#[test]
fn trusted_proxies_are_addresses_or_networks_and_a_typo_is_named() {
    let dir = tempfile::tempdir().expect("dir");
    let load = |text: &str| load_file(dir.path(), text);
    let c = load(
        "[limits]\ntrusted_proxies = [\"10.0.0.0/8\", \"192.0.2.7\", \"2001:db8::/32\"]\n\
         client_address_header = \"Forwarded\"\n",
    )
    .expect("config");
    let p = c.limits.proxies();
    assert!(p.trusts("10.200.0.1".parse().expect("ip")));
    assert!(p.trusts("192.0.2.7".parse().expect("ip")));
    assert!(!p.trusts("192.0.2.8".parse().expect("ip")));
    assert!(p.trusts("2001:db8:5::1".parse().expect("ip")));
    assert_eq!(
        c.limits.client_address_header,
        crate::api::forwarded::ClientAddressHeader::Forwarded
    );
    for (bad, says) in [
        ("trusted_proxies = [\"10.0.0/8\"]", "10.0.0/8"),
        (
            "trusted_proxies = [\"127.0.9.1/8\"]",
            "write the network (127.0.0.0/8) or the one address (127.0.9.1)",
        ),
        ("trusted_proxies = [\"proxy.internal\"]", "proxy.internal"),
        ("trusted_proxies = \"10.0.0.0/8\"", "sequence"),
        ("client_address_header = \"x-real-ip\"", "x-forwarded-for"),
    ] {
        let e = format!("{:#}", load(&format!("[limits]\n{bad}\n")).expect_err(bad));
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn request_log_and_metrics_listen_are_read_and_mistakes_named() {
    let dir = tempfile::tempdir().expect("dir");
    let load = |text: &str| load_file(dir.path(), text);
    let c = load("request_log = \"errors\"\nmetrics_listen = \"127.0.0.1:9464\"\n").expect("ok");
    assert_eq!(c.request_log, crate::api::state::RequestLog::Errors);
    assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9464));
    let c = load("").expect("defaults");
    assert_eq!(c.request_log, crate::api::state::RequestLog::Sampled);
    assert!(c.metrics_listen.is_none());
    for (bad, says) in [
        (
            "request_log = \"verbose\"",
            "\"sampled\", \"all\" or \"errors\"",
        ),
        ("metrics_listen = \"9464\"", "address and port"),
    ] {
        let e = format!("{:#}", load(bad).expect_err(bad));
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn blob_sources_are_checked_and_named_on_the_wire_form() {
    let dir = std::env::temp_dir().join(format!("ferry-config-sources-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let c = load_file(
        &dir,
        "sources = [\"HTTPS://cdn.example.com/v1/blobs/sha256/\", \"origin\"]",
    )
    .expect("valid sources");
    assert_eq!(
        c.sources,
        [
            "https://cdn.example.com/v1/blobs/sha256/",
            "/v1/blobs/sha256/"
        ]
    );
    for (text, says) in [
        (
            "sources = [\"https://cdn.example.com/x\"]",
            "must end in '/'",
        ),
        (
            "sources = [\"ftp://cdn.example.com/x/\"]",
            "must start with",
        ),
        ("sources = [\"https://cdn.example.com/x/?sig=1/\"]", "query"),
        (
            "sources = [\"https://u:p@cdn.example.com/x/\"]",
            "credentials",
        ),
        (
            "sources = [\"origin\", \"origin\"]",
            "\"origin\" is listed twice",
        ),
        ("sources = [\"\"]", "must end in '/'"),
    ] {
        let err = load_file(&dir, text).expect_err(text);
        assert!(format!("{err:#}").contains(says), "{text}: {err:#}");
    }
    let many: Vec<String> = (0..9)
        .map(|i| format!("\"https://m{i}.example/\""))
        .collect();
    let err = load_file(&dir, &format!("sources = [{}]", many.join(", "))).expect_err("nine");
    assert!(format!("{err:#}").contains("at most 8"), "{err:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_mirror_disk_budget_is_a_number_of_at_least_a_mebibyte() {
    let dir = tempfile::tempdir().expect("dir");
    let c = load_file(dir.path(), "[mirror]\nmax_held_bytes = 10737418240\n").expect("config");
    assert_eq!(c.mirror_max_held_bytes, Some(10 << 30));
    assert_eq!(
        load_file(dir.path(), "")
            .expect("config")
            .mirror_max_held_bytes,
        None
    );
    let err = load_file(dir.path(), "[mirror]\nmax_held_bytes = 5\n").expect_err("tiny");
    assert!(format!("{err:#}").contains("at least 1048576"), "{err:#}");
    assert!(
        load_file(dir.path(), "[mirror]\nmax_bytes = 5\n").is_err(),
        "a typo is an error"
    );
}

#[test]
fn the_sealing_policy_needs_an_exec_verifier_to_require_attestation() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = load_file(dir.path(), "").expect("defaults");
    assert_eq!(c.sealing, crate::release::attest::SealingConfig::default());
    let c = load_file(
        dir.path(),
        "[sealing]\nattestation_verifier = \"exec:/usr/local/bin/verify --strict\"\nrequire_attestation = true\n",
    )
    .expect("a verifier");
    assert!(c.sealing.require_attestation && c.sealing.verifier().is_some());
    for (bad, says) in [
        (
            "[sealing]\nrequire_attestation = true\n",
            "needs an attestation_verifier",
        ),
        (
            "[sealing]\nattestation_verifier = \"/bin/verify\"\n",
            "exec:COMMAND",
        ),
        (
            "[sealing]\nattestation_verifier = \"exec:  \"\n",
            "exec:COMMAND",
        ),
        ("[sealing]\nverifier = \"exec:x\"\n", "unknown field"),
    ] {
        let e = format!("{:#}", load_file(dir.path(), bad).expect_err(bad));
        assert!(e.contains(says), "{bad}: {e}");
    }
}
