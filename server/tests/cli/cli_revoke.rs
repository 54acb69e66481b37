//! `ferry release revoke` through the real binary against a real server.

use crate::common;

use common::{TOKEN, ferry, run_ok, serve, setup};

#[test]
fn revoke_signs_the_next_list_and_the_server_stops_offering_the_release() {
    let s = setup("rev");
    let server = serve(&s.data);
    for release in [&s.v1, &s.v2] {
        run_ok(
            ferry()
                .arg("publish")
                .arg(release)
                .arg("--files")
                .arg(&s.files)
                .args(["--server", &server.url, "--token", TOKEN, "--quiet"]),
        );
    }
    let revoke = |version: &str, key: &str| {
        ferry()
            .args(["release", "revoke", "rev", version, "--key"])
            .arg(s.data.join("keys").join(key))
            .args(["--reason", "crashes on start", "--server", &server.url])
            .env("FERRY_TOKEN", TOKEN)
            .output()
            .expect("run")
    };
    let out = revoke("1.0.0", "release.key");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("revocation list version 1"), "{text}");
    // Again: nothing to do, and said so.
    let again = revoke("1.0.0", "release.key");
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("already revoked"));
    // The online key may not sign revocations; a bad version is refused before anything is sent.
    let wrong = revoke("2.0.0", "online.key");
    assert_eq!(wrong.status.code(), Some(2), "a usage mistake");
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("release key"));
    let bad = revoke("1.0", "release.key");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("semantic version"));

    // Signing the list again (after a release key rotation) adds nothing and bumps the version.
    let resign = ferry()
        .args(["release", "revoke", "rev", "--resign", "--key"])
        .arg(s.data.join("keys/release.key"))
        .args(["--server", &server.url])
        .env("FERRY_TOKEN", TOKEN)
        .output()
        .expect("run");
    assert!(
        resign.status.success(),
        "{}",
        String::from_utf8_lossy(&resign.stderr)
    );
    assert!(String::from_utf8_lossy(&resign.stdout).contains("again as version 2"));
    // Neither a version nor --resign: a usage mistake, said so.
    let neither = ferry()
        .args(["release", "revoke", "rev", "--key"])
        .arg(s.data.join("keys/release.key"))
        .args(["--server", &server.url])
        .env("FERRY_TOKEN", TOKEN)
        .output()
        .expect("run");
    assert_eq!(neither.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&neither.stderr).contains("--resign"));

    let mut resp = ureq::get(format!("{}/v1/admin/models/rev/revocations", server.url))
        .header("authorization", format!("Bearer {TOKEN}"))
        .call()
        .expect("GET");
    let list: serde_json::Value =
        serde_json::from_reader(resp.body_mut().as_reader()).expect("json");
    assert_eq!(list["version"], 2, "{list}");
    assert_eq!(list["revoked"][0]["release"], "1.0.0");
    assert_eq!(list["revoked"][0]["reason"], "crashes on start");
}
