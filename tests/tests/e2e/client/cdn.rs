//! Devices behind a real caching proxy (Varnish, with the configuration operators are given in
//! `deploy/cdn/varnish.vcl`), as behind a CDN or a site cache: whole downloads, resumed
//! downloads and delta `Range` requests are served from the cache after the first device, the
//! cache honours `ETag`, `If-None-Match` and `If-Range`, and nothing made for one device (resolve
//! answers, signed time) or for operators (admin routes) is cached.

use ferry_tests::app::{ADMIN_TOKEN, Options, TestApp};
use ferry_tests::kit::device;
use ferry_tests::varnish::Varnish;

use super::delta::{LARGE, World, client, fine_tuned, noise};

/// An HTTP agent that reports every status.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent()
}

/// `GET url` with `headers`: the status, the `X-Ferry-Cache` verdict and the body's length.
fn get(url: &str, headers: &[(&str, &str)]) -> (u16, String, usize) {
    let mut req = agent().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req.call().expect("request");
    let verdict = resp
        .headers()
        .get("x-ferry-cache")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = resp
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .expect("body");
    (resp.status().as_u16(), verdict, body.len())
}

#[test]
fn devices_behind_varnish_fetch_each_file_once_from_the_origin_and_nothing_per_device_is_cached() {
    let origin = TestApp::start_with(Options {
        tweak: Some(Box::new(ferry_tests::fast_telemetry)),
        ..Default::default()
    });
    let dir = tempfile::tempdir().expect("tmp");
    let asset_bytes = noise(4 << 20, 21);
    let asset_path = dir.path().join("weights.bin");
    std::fs::write(&asset_path, &asset_bytes).expect("write");
    let (m, _) = origin.publish(&ferry_tests::releases::portable_with_asset(
        "cdn",
        "1.0.0",
        &asset_path,
    ));
    let (program, asset) = (&m.variants[0], &m.variants[0].assets[0]);
    let cdn = Varnish::in_front_of(origin.server.addr);

    // The first device fills the cache; the second is served from it.
    let c1 = client(&cdn.url, &origin, &dir.path().join("d1"));
    c1.load("cdn", &device("cdn-1"))
        .expect("first device loads");
    let from_origin = origin.blob_bytes_served();
    assert!(from_origin >= asset.size + program.size, "{from_origin}");
    let hits = cdn.counter("MAIN.cache_hit");
    let c2 = client(&cdn.url, &origin, &dir.path().join("d2"));
    let m2 = c2
        .load("cdn", &device("cdn-2"))
        .expect("second device loads");
    assert_eq!(
        origin.blob_bytes_served(),
        from_origin,
        "the second device's bytes came from the cache"
    );
    // The program, the asset and the signed release manifest.
    let hits = cdn.counter_at_least("MAIN.cache_hit", hits + 3);
    assert_eq!(
        std::fs::read(m2.asset("weights.bin").expect("asset")).expect("read"),
        asset_bytes
    );
    drop(m2);

    // A download cut half way resumes with a Range request the cache answers.
    let d3 = dir.path().join("d3");
    let blobs = d3.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).expect("dir");
    std::fs::write(
        blobs.join(format!("{}.part", asset.sha256.to_hex())),
        &asset_bytes[..asset_bytes.len() / 2],
    )
    .expect("part");
    let sent = cdn.counter("MAIN.s_resp_bodybytes");
    let c3 = client(&cdn.url, &origin, &d3);
    let m3 = c3
        .load("cdn", &device("cdn-3"))
        .expect("a resumed download");
    // The program, the rest of the asset and the release manifest.
    let hits = cdn.counter_at_least("MAIN.cache_hit", hits + 3);
    let sent = cdn.counter("MAIN.s_resp_bodybytes") - sent;
    assert!(
        sent < program.size + asset.size,
        "{sent} bytes sent: the half the device held was not sent again"
    );
    assert_eq!(
        std::fs::read(m3.asset("weights.bin").expect("asset")).expect("read"),
        asset_bytes
    );
    drop(m3);
    assert_eq!(origin.blob_bytes_served(), from_origin);

    // Validators, answered by the cache.
    let url = format!("{}/v1/blobs/sha256/{}", cdn.url, asset.sha256.to_hex());
    let etag = format!("\"{}\"", asset.sha256.to_hex());
    assert_eq!(
        get(&url, &[("if-none-match", &etag)]),
        (304, "hit".into(), 0)
    );
    assert_eq!(
        get(&url, &[("range", "bytes=0-9"), ("if-range", &etag)]),
        (206, "hit".into(), 10)
    );
    assert_eq!(
        get(&url, &[("range", "bytes=0-9"), ("if-range", "\"other\"")]),
        (200, "hit".into(), asset_bytes.len()),
        "a partial copy of something else gets the whole file"
    );

    // Nothing made for one device or for operators is cached.
    let hits = cdn.counter_at_least("MAIN.cache_hit", hits + 3);
    let passes = cdn.counter("MAIN.s_pass");
    for _ in 0..2 {
        let plan = c1.resolve("cdn", &device("cdn-1")).expect("resolve");
        assert_eq!(plan.value().decision().release.to_string(), "1.0.0");
        assert_eq!(get(&format!("{}/v1/time", cdn.url), &[]).1, "pass");
        assert_eq!(get(&format!("{}/v1/keyring", cdn.url), &[]).1, "pass");
        let admin = get(
            &format!("{}/v1/admin/models", cdn.url),
            &[("authorization", &format!("Bearer {ADMIN_TOKEN}"))],
        );
        assert_eq!((admin.0, admin.1.as_str()), (200, "pass"));
        assert_eq!(get(&format!("{}/v1/admin/models", cdn.url), &[]).0, 401);
    }
    // Resolve, time, keyring and the admin route twice each, and the refused admin call.
    cdn.counter_at_least("MAIN.s_pass", passes + 10);
    assert_eq!(
        cdn.counter("MAIN.cache_hit"),
        hits,
        "no hit on a per-device route"
    );
}

#[test]
fn delta_updates_through_varnish_reach_the_origin_once() {
    let v1 = noise(LARGE, 31);
    let world = World::new(&v1, fine_tuned(&v1));
    // A second device that holds 1.0.0 too.
    let other = world.dir.path().join("cache-2");
    ferry_tests::app::copy_tree(&world.cache(), &other).expect("copy the cache");
    let cdn = Varnish::in_front_of(world.app.server.addr);
    let before = world.app.blob_bytes_served();
    world.load_v2(&cdn.url);
    let after_first = world.app.blob_bytes_served();
    // A cache fetches the whole object for the first range it misses (as CDNs do): the origin
    // sends the new file once, however many devices update.
    assert!(
        after_first - before <= LARGE as u64 + (1 << 20),
        "{} bytes from the origin",
        after_first - before
    );
    let hits = cdn.counter("MAIN.cache_hit");
    let c = client(&cdn.url, &world.app, &other);
    let m = c
        .load("delta", &device("delta-device-2"))
        .expect("2.0.0 loads");
    assert_eq!(
        std::fs::read(m.asset("weights.bin").expect("asset")).expect("read"),
        world.v2
    );
    assert_eq!(
        world.app.blob_bytes_served(),
        after_first,
        "the second device's ranges came from the cache"
    );
    cdn.counter_at_least("MAIN.cache_hit", hits + 2);
}
