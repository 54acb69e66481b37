//! Devices whose clocks are wrong, over HTTPS with a certificate valid for 90 days (as a
//! public CA issues them): a device in 1970 or 2040 would fail the handshake before it could
//! learn the time. The client learns it first from the signed time (`GET /v1/time`), fetched
//! through a connection whose certificate is checked in full except its dates, and judges
//! every other certificate at the learned time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferry_client::{Clock, SystemClock};
use ferry_server::app::config::TlsConfig;
use ferry_shared::manifest::Platform;
use ferry_tests::app::{Options, TestApp, mlp_v1};
use time::OffsetDateTime;

use crate::client::e2e::phone;
use ferry_tests::kit::quick_limits;

/// A test CA (the app's only root) and a server certificate it issued.
pub(crate) struct Pki {
    /// The CA certificate (DER), what the app pins.
    pub ca_der: Vec<u8>,
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// Its key (PEM).
    pub key: PathBuf,
    _dir: tempfile::TempDir,
}

/// A CA, and a certificate for `names` valid from `from` to `to`, issued by it.
pub(crate) fn pki(names: &[&str], from: OffsetDateTime, to: OffsetDateTime) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "ferry test CA");
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("key");
    let mut leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .expect("params");
    leaf.not_before = from;
    leaf.not_after = to;
    let cert = leaf.signed_by(&key, &issuer).expect("certificate");
    let dir = tempfile::tempdir().expect("tmp");
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).expect("write cert");
    std::fs::write(&key_path, key.serialize_pem()).expect("write key");
    Pki {
        ca_der: ca_cert.der().to_vec(),
        cert: cert_path,
        key: key_path,
        _dir: dir,
    }
}

/// A certificate for the loopback address valid from yesterday for 90 days.
pub(crate) fn current() -> Pki {
    let now = OffsetDateTime::now_utc();
    pki(
        &["127.0.0.1", "localhost"],
        now - time::Duration::days(1),
        now + time::Duration::days(89),
    )
}

/// The server over HTTPS with `pki`'s certificate (`limit`: its fresh-signature allowance per
/// address and minute), the demo-free catalog holding `mlp` 1.0.0.
pub(crate) fn https_app(pki: &Pki, limit: Option<u32>) -> TestApp {
    let (cert, key) = (pki.cert.clone(), pki.key.clone());
    let mut app = TestApp::start_with(Options {
        tweak: Some(Box::new(move |cfg| {
            cfg.tls = Some(TlsConfig { cert, key });
            if let Some(l) = limit {
                cfg.limits.fresh_decisions_per_minute = l;
            }
        })),
        ..Default::default()
    });
    assert!(app.url().starts_with("https://"));
    // The operator's tools here are not under test: they skip the certificate check (the
    // expired-certificate case needs that too).
    app.agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .disable_verification(true)
                .build(),
        )
        .build()
        .new_agent();
    app.publish(&mlp_v1());
    app
}

/// A device clock `offset` away from the real time, with the real boot clock.
struct Skewed {
    offset: time::Duration,
}

impl Clock for Skewed {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc() + self.offset
    }

    fn since_boot(&self) -> Option<(String, Duration)> {
        SystemClock.since_boot()
    }
}

fn client(app: &TestApp, pki: &Pki, cache: &Path, offset: time::Duration) -> ferry_client::Client {
    app.client(cache)
        .app_version(semver::Version::new(2, 0, 0))
        .download_limits(quick_limits())
        .root_certificate_der(pki.ca_der.clone())
        .clock(Arc::new(Skewed { offset }))
        .build()
        .expect("client")
}

/// A counter from the server's metrics (0 when absent).
fn metric(app: &TestApp, series: &str) -> u64 {
    app.counter(series).unwrap_or(0)
}

const SIGNED_TIMES: &str = "ferry_signed_times_total{outcome=\"signed\"}";
const FRESH_DECISIONS: &str = "ferry_fresh_decisions_total{outcome=\"signed\"}";

/// Offsets from the real time: 55 years, 400 days and 2 days behind; 90 minutes ahead and
/// 14 years ahead; and none.
fn skews() -> Vec<time::Duration> {
    let (m, d) = (time::Duration::minutes(1), time::Duration::days(1));
    vec![
        -d * (55 * 365),
        -d * 400,
        -d * 2,
        time::Duration::ZERO,
        m * 90,
        d * (14 * 365),
    ]
}

#[test]
fn over_https_devices_with_wrong_clocks_learn_the_time_then_take_the_shared_answer() {
    let pki = current();
    let app = https_app(&pki, None);
    for offset in skews() {
        let cache = tempfile::tempdir().expect("tmp");
        let c = client(&app, &pki, cache.path(), offset);
        let m = c
            .load("mlp", &phone(Platform::Linux, &["XnnpackBackend"]))
            .unwrap_or_else(|e| panic!("{offset}: {e}"));
        assert_eq!(m.release, "1.0.0", "{offset}");
        let learned = c.clock_offset_secs().expect("the time is learned");
        assert!(
            (learned - offset.whole_seconds()).abs() <= 120,
            "{offset}: learned an offset of {learned} s"
        );
    }
    // One signed time per device, and no decision of its own: after the time, each took the
    // shared answer (the cheap path), judged by the learned time.
    assert_eq!(metric(&app, SIGNED_TIMES), skews().len() as u64);
    assert_eq!(metric(&app, FRESH_DECISIONS), 0);

    // A later process of the same boot keeps the estimate: no new signed time.
    let cache = tempfile::tempdir().expect("tmp");
    let slow = -time::Duration::days(400);
    client(&app, &pki, cache.path(), slow)
        .load("mlp", &phone(Platform::Linux, &["XnnpackBackend"]))
        .expect("first");
    let again = client(&app, &pki, cache.path(), slow);
    again
        .resolve("mlp", &phone(Platform::Linux, &["XnnpackBackend"]))
        .expect("second process");
    assert_eq!(metric(&app, SIGNED_TIMES), skews().len() as u64 + 1);
}

#[test]
fn a_device_refused_the_signed_time_fails_the_handshake_with_a_certificate_error() {
    // One signature per address and minute: the first device spends it.
    let pki = current();
    let app = https_app(&pki, Some(1));
    let dev = phone(Platform::Linux, &["XnnpackBackend"]);
    let past = -time::Duration::days(55 * 365);
    let first = tempfile::tempdir().expect("tmp");
    client(&app, &pki, first.path(), past)
        .load("mlp", &dev)
        .expect("the first device learns the time");

    // The next one in 1970 gets no signed time: its own clock cannot vouch for the server's
    // certificate, and it says so.
    let second = tempfile::tempdir().expect("tmp");
    let err = client(&app, &pki, second.path(), past)
        .resolve("mlp", &dev)
        .expect_err("no time, no handshake");
    let text = err.to_string();
    assert!(
        text.contains("certificate") && text.contains("not valid"),
        "{text}"
    );
    assert_eq!(err.code(), "server_certificate_invalid", "{text}");

    // A device whose clock is right needs no signed time: it is refused one, and the shared
    // answer (after its decision of its own is refused too) still loads.
    let third = tempfile::tempdir().expect("tmp");
    client(&app, &pki, third.path(), time::Duration::ZERO)
        .load("mlp", &dev)
        .expect("a right clock is enough");
    assert!(metric(&app, "ferry_signed_times_total{outcome=\"limited\"}") >= 2);
}

#[test]
fn an_expired_or_misnamed_certificate_is_still_refused() {
    let dev = phone(Platform::Linux, &["XnnpackBackend"]);
    let now = OffsetDateTime::now_utc();
    // Expired yesterday: the signed time is learned (its dates are not what the time
    // connection checks), and at that time every other connection refuses the certificate,
    // whatever the device's clock says.
    let expired = pki(
        &["127.0.0.1"],
        now - time::Duration::days(91),
        now - time::Duration::days(1),
    );
    let app = https_app(&expired, None);
    for offset in [time::Duration::ZERO, -time::Duration::days(2)] {
        let cache = tempfile::tempdir().expect("tmp");
        let c = client(&app, &expired, cache.path(), offset);
        let err = c.resolve("mlp", &dev).expect_err("expired certificate");
        assert!(err.to_string().contains("expired"), "{offset}: {err}");
        assert_eq!(err.code(), "server_certificate_invalid", "{offset}: {err}");
        assert!(
            c.clock_offset_secs().is_some(),
            "{offset}: the time was learned"
        );
    }
    drop(app);

    // A certificate for another name: both connections refuse it, nothing is learned.
    let other = pki(
        &["other.example"],
        now - time::Duration::days(1),
        now + time::Duration::days(89),
    );
    let app = https_app(&other, None);
    let cache = tempfile::tempdir().expect("tmp");
    let c = client(&app, &other, cache.path(), -time::Duration::days(55 * 365));
    let err = c.resolve("mlp", &dev).expect_err("wrong name");
    assert_eq!(err.code(), "server_certificate_invalid", "{err}");
    assert!(
        err.to_string().contains("not valid for name"),
        "the name is the problem, not the dates: {err}"
    );
    assert_eq!(c.clock_offset_secs(), None);
    assert_eq!(metric(&app, SIGNED_TIMES), 0);
}

#[test]
fn a_real_client_process_in_1970_and_2040_loads_over_https() {
    let pki = current();
    let app = https_app(&pki, None);
    let dir = tempfile::tempdir().expect("tmp");
    let (trust, ca) = (dir.path().join("trust.json"), dir.path().join("ca.der"));
    std::fs::write(&trust, serde_json::to_vec(&app.trust()).expect("json")).expect("trust");
    std::fs::write(&ca, &pki.ca_der).expect("ca");
    for fake in [
        "@1970-01-02 00:00:00",
        "-400d",
        "+400d",
        "@2040-06-01 00:00:00",
    ] {
        let cache = tempfile::tempdir().expect("tmp");
        let first = crate::client::clock::load_under_faketime(
            fake,
            &app.url(),
            &trust,
            cache.path(),
            Some(&ca),
        );
        assert_eq!(first["ok"], true, "{fake}: {first}");
        assert_eq!(first["release"], "1.0.0", "{fake}");
    }
}

#[test]
fn the_signed_time_endpoint_answers_one_nonce_and_refuses_bad_ones() {
    use base64::Engine as _;
    use ferry_shared::trust::clock::{SignedTime, TIME_PAYLOAD_TYPE, TimeResponse};
    let app = TestApp::start_with(Options {
        tweak: Some(Box::new(|c| c.limits.fresh_decisions_per_minute = 3)),
        ..Default::default()
    });
    let nonce = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([7u8; 24]);
    let mut resp = app
        .agent
        .get(app.at(&format!("/v1/time?nonce={nonce}&later=1")))
        .call()
        .expect("time");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("no-store")
    );
    let answer: TimeResponse =
        serde_json::from_str(&resp.body_mut().read_to_string().expect("body")).expect("json");
    let mut trust =
        ferry_shared::trust::keyring::TrustState::from_trust_file(&app.trust()).expect("trust");
    let chain: ferry_shared::trust::keyring::KeyringResponse = serde_json::from_str(
        &app.agent
            .get(app.at("/v1/keyring"))
            .call()
            .expect("keyring")
            .body_mut()
            .read_to_string()
            .expect("body"),
    )
    .expect("keyring json");
    trust.advance_all(&chain.keyrings).expect("walk");
    let verified = ferry_shared::trust::dsse::verify(
        &answer.time,
        TIME_PAYLOAD_TYPE,
        &trust.ring_at(OffsetDateTime::now_utc()),
        ferry_shared::trust::dsse::KeyRole::Online,
        1,
        &Default::default(),
    )
    .expect("signed by the online key");
    let signed = SignedTime::from_json(verified.value()).expect("payload");
    assert_eq!(signed.nonce, nonce);
    assert!((signed.time - OffsetDateTime::now_utc()).abs() < time::Duration::minutes(1));

    for (query, why) in [
        (String::new(), "no nonce"),
        ("?nonce=".to_string(), "empty"),
        ("?nonce=c2hvcnQ".to_string(), "too short"),
        (format!("?nonce={}", "A".repeat(4000)), "too long"),
        ("?nonce=%00%FF%FE".to_string(), "not base64url"),
        (format!("?nonce={nonce}=="), "padded"),
    ] {
        let mut resp = app
            .agent
            .get(app.at(&format!("/v1/time{query}")))
            .call()
            .expect("answer");
        let status = resp.status().as_u16();
        let body: serde_json::Value =
            serde_json::from_str(&resp.body_mut().read_to_string().unwrap_or_default())
                .unwrap_or_default();
        assert!((400..500).contains(&status), "{why}: {status}");
        assert_eq!(body["code"], "request_invalid", "{why}: {body}");
    }
    let post = app
        .agent
        .post(app.at("/v1/time"))
        .send(&b"{}"[..])
        .expect("post");
    assert_eq!(post.status().as_u16(), 405);

    // The allowance is shared with decisions of their own: two more, then 429.
    let answers: Vec<(u16, Option<String>)> = (0..3)
        .map(|_| {
            let r = app
                .agent
                .get(app.at(&format!("/v1/time?nonce={nonce}")))
                .call()
                .expect("time");
            let retry = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            (r.status().as_u16(), retry)
        })
        .collect();
    assert_eq!(
        answers,
        [(200, None), (200, None), (429, Some("60".to_string()))]
    );
    assert_eq!(metric(&app, SIGNED_TIMES), 3);
    assert_eq!(
        metric(&app, "ferry_signed_times_total{outcome=\"limited\"}"),
        1
    );
}

#[test]
fn a_device_never_learns_a_time_before_one_it_learned() {
    // The device learned, in an earlier boot, a time a day ahead of the server's now (as if
    // the server had been wound back, or an attacker replays an old signed time with an old
    // certificate): the server's time is refused and nothing is learned.
    let pki = current();
    let app = https_app(&pki, None);
    let cache = tempfile::tempdir().expect("tmp");
    let ahead = OffsetDateTime::now_utc() + time::Duration::days(1);
    std::fs::write(
        cache.path().join("clock.json"),
        serde_json::to_vec(&serde_json::json!({
            "latest": ahead.format(&time::format_description::well_known::Rfc3339).expect("time"),
        }))
        .expect("json"),
    )
    .expect("write");
    let c = client(&app, &pki, cache.path(), time::Duration::ZERO);
    let err = c
        .resolve("mlp", &phone(Platform::Linux, &["XnnpackBackend"]))
        .expect_err("an earlier time");
    assert_eq!(err.code(), "decision_untimely", "{err}");
    assert!(err.to_string().contains("before"), "{err}");
    assert_eq!(c.clock_offset_secs(), None, "nothing learned");
}
