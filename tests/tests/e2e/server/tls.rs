//! HTTPS through rustls with a configured certificate, checked by a real TLS client.

use std::sync::Arc;

use ferry_server::app::config::TlsConfig;
use ferry_tests::app::{Options, TestApp, mlp_v1, profile};

#[test]
fn serves_https_with_a_configured_certificate() {
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("certificate");
    let dir = tempfile::tempdir().expect("tmp");
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).expect("write cert");
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).expect("write key");
    let (c, k) = (cert_path.clone(), key_path.clone());
    let mut app = TestApp::start_with(Options {
        demo: false,
        keys: None,
        store: None,
        tweak: Some(Box::new(move |cfg| {
            cfg.tls = Some(TlsConfig { cert: c, key: k })
        })),
    });
    assert!(app.url().starts_with("https://"));

    // A client that trusts only this certificate.
    let der = ureq::tls::Certificate::from_der(cert.cert.der()).to_owned();
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(vec![der])))
                .build(),
        )
        .build()
        .new_agent();
    app.agent = agent.clone();
    app.publish(&mlp_v1());
    let url = app.url().replace("127.0.0.1", "localhost");
    let mut resp = agent
        .post(format!("{url}/v1/resolve"))
        .header("content-type", "application/json")
        .send(
            serde_json::to_vec(&profile(
                "linux",
                &["XnnpackBackend"],
                "1.5.1",
                "1.0.0",
                4096,
            ))
            .expect("json")
            .as_slice(),
        )
        .expect("https request");
    assert_eq!(resp.status().as_u16(), 200);
    let body: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json");
    let (decision, _) = app.verify_response(&body);
    assert_eq!(decision.candidates.len(), 2);

    // A client that does not trust it is refused at the handshake.
    let strict = ureq::Agent::config_builder().build().new_agent();
    assert!(strict.get(format!("{url}/healthz")).call().is_err());

    // Bad TLS files are a clear start-up error.
    std::fs::write(&key_path, "not a key").expect("write");
    let err = ferry_server::app::listen::tls_config(&cert_path, &key_path).expect_err("bad key");
    assert!(err.to_string().contains("private key"), "{err}");
}
