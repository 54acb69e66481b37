//! Blob delivery: ranges, resume, conditional requests, caching headers.

use ferry_shared::Sha256Digest;
use ferry_tests::app::{TestApp, mlp_v1};

fn fetch(
    app: &TestApp,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut req = app.agent.get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req.call().expect("request");
    let status = resp.status().as_u16();
    let hdrs = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let body = resp
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_vec()
        .expect("body");
    (status, hdrs, body)
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[test]
fn ranges_reassemble_to_the_exact_bytes() {
    let app = TestApp::start();
    let (m, _) = app.publish(&mlp_v1());
    let v = &m.variants[0];
    let url = app.at(&format!("/v1/blobs/sha256/{}", v.sha256.to_hex()));

    let (status, h, full) = fetch(&app, &url, &[]);
    assert_eq!(status, 200);
    assert_eq!(Sha256Digest::of(&full), v.sha256);
    assert_eq!(
        header(&h, "etag"),
        Some(format!("\"{}\"", v.sha256.to_hex()).as_str())
    );
    assert_eq!(
        header(&h, "cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(header(&h, "accept-ranges"), Some("bytes"));

    // Chunks of odd sizes.
    let size = v.size as usize;
    for chunk in [1usize, 7, 1000, 4096] {
        let mut got = Vec::new();
        let mut at = 0;
        while at < size {
            let end = (at + chunk).min(size) - 1;
            let (status, h, body) = fetch(&app, &url, &[("range", &format!("bytes={at}-{end}"))]);
            assert_eq!(status, 206);
            assert_eq!(
                header(&h, "content-range"),
                Some(format!("bytes {at}-{end}/{size}").as_str())
            );
            assert_eq!(body.len(), end - at + 1);
            got.extend_from_slice(&body);
            at = end + 1;
            if chunk == 1 && at > 64 {
                // One-byte chunks over the whole file would be slow; finish with an open range.
                let (_, _, rest) = fetch(&app, &url, &[("range", &format!("bytes={at}-"))]);
                got.extend_from_slice(&rest);
                at = size;
            }
        }
        assert_eq!(Sha256Digest::of(&got), v.sha256, "chunk {chunk}");
    }

    // A resume: the first part from one response, the rest from an open range.
    let cut = size / 3;
    let mut resumed = full[..cut].to_vec();
    let (status, _, rest) = fetch(&app, &url, &[("range", &format!("bytes={cut}-"))]);
    assert_eq!(status, 206);
    resumed.extend_from_slice(&rest);
    assert_eq!(resumed, full);

    // Suffix range.
    let (status, _, tail) = fetch(&app, &url, &[("range", "bytes=-10")]);
    assert_eq!((status, tail.as_slice()), (206, &full[size - 10..]));

    // Unsatisfiable.
    let (status, h, body) = fetch(&app, &url, &[("range", &format!("bytes={size}-"))]);
    assert_eq!(status, 416);
    assert_eq!(
        header(&h, "content-range"),
        Some(format!("bytes */{size}").as_str())
    );
    let error: serde_json::Value = serde_json::from_slice(&body).expect("a JSON error body");
    assert_eq!(error["code"], "range_not_satisfiable", "{error}");

    // Multiple ranges are answered with the whole blob.
    let (status, _, body) = fetch(&app, &url, &[("range", "bytes=0-1,5-6")]);
    assert_eq!((status, body.len()), (200, size));

    // Conditional GET.
    let etag = format!("\"{}\"", v.sha256.to_hex());
    let (status, _, body) = fetch(&app, &url, &[("if-none-match", &etag)]);
    assert_eq!((status, body.len()), (304, 0));

    // HEAD gives the length without a body.
    let resp = app.agent.head(&url).call().expect("head");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok()),
        Some(size.to_string().as_str())
    );

    // Unknown and malformed digests.
    let (status, _, _) = fetch(
        &app,
        &app.at(&format!("/v1/blobs/sha256/{}", "0".repeat(64))),
        &[],
    );
    assert_eq!(status, 404);
    for bad in [
        "abc",
        &"Z".repeat(64),
        &"A".repeat(64),
        "..%2F..%2Fetc%2Fpasswd",
    ] {
        let (status, _, _) = fetch(&app, &app.at(&format!("/v1/blobs/sha256/{bad}")), &[]);
        assert_eq!(status, 400, "{bad}");
    }
}

#[test]
fn keys_and_operations_endpoints() {
    let app = TestApp::start();
    app.publish(&mlp_v1());
    let (status, keys) = app.get_json("/v1/keys", None);
    assert_eq!(status, 200);
    let trust: ferry_shared::trust::TrustFile = serde_json::from_value(keys).expect("trust file");
    assert_eq!(trust, app.trust());

    let (status, _, body) = fetch(&app, &app.at("/healthz"), &[]);
    assert_eq!((status, body.as_slice()), (200, &b"ok\n"[..]));
    // A caller's request id is kept (answer header and error body); a malformed one is not.
    let mut r = app
        .agent
        .get(app.at("/v1/admin/models/nosuch"))
        .header("x-request-id", "edge-1234:abc")
        .header(
            "authorization",
            format!("Bearer {}", ferry_tests::app::ADMIN_TOKEN),
        )
        .call()
        .expect("request");
    assert_eq!(
        r.headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("edge-1234:abc")
    );
    let err: serde_json::Value =
        serde_json::from_str(&r.body_mut().read_to_string().expect("body")).expect("json");
    assert_eq!(err["request_id"], "edge-1234:abc", "{err}");
    let r = app
        .agent
        .get(app.at("/healthz"))
        .header("x-request-id", "bad id with spaces")
        .call()
        .expect("request");
    let own = r
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(!own.is_empty() && own != "bad id with spaces", "{own}");
    let (status, ready) = app.get_json("/readyz", None);
    assert_eq!((status, ready["releases"].as_u64()), (200, Some(1)));

    let dev = ferry_tests::app::profile("linux", &["XnnpackBackend"], "1.5.1", "1.0.0", 4096);
    app.resolve(&dev, false);
    let text = app.metrics();
    assert!(
        text.contains("ferry_resolves_total{outcome=\"ok\"} 1"),
        "{text}"
    );
    // Process and fleet state: a published model with no staged release, an empty deny list.
    assert!(
        text.contains("ferry_rollout_staged_basis_points{model=\"mlp\"} 0")
            && text.contains("ferry_rollout_active{model=\"mlp\"} 0")
            && text.contains("ferry_deny_entries{model=\"mlp\"} 0"),
        "{text}"
    );
    let rss = text
        .lines()
        .find_map(|l| l.strip_prefix("ferry_process_resident_memory_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("resident memory");
    assert!(rss > 1e6, "{rss}");
    assert!(text.contains("# HELP ferry_process_open_fds"), "{text}");
    assert!(
        text.contains("ferry_publishes_total{outcome=\"ok\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "ferry_http_requests_total{route=\"/v1/resolve\",method=\"POST\",status=\"200\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "ferry_http_request_duration_seconds_bucket{le=\"+Inf\",route=\"/v1/resolve\"} 1"
        ),
        "{text}"
    );

    // Unknown routes and methods answer JSON errors.
    let (status, body) = app.get_json("/v2/nothing", None);
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, body) = app.get_json("/v1/resolve", None);
    assert_eq!(
        (status, body["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
}

#[test]
fn if_range_serves_a_range_only_for_this_blob() {
    let app = TestApp::start();
    let (m, _) = app.publish(&mlp_v1());
    let v = &m.variants[0];
    let url = app.at(&format!("/v1/blobs/sha256/{}", v.sha256.to_hex()));
    let etag = format!("\"{}\"", v.sha256.to_hex());
    // The ETag matches: the range.
    let (status, _, body) = fetch(&app, &url, &[("range", "bytes=0-9"), ("if-range", &etag)]);
    assert_eq!((status, body.len()), (206, 10));
    // Another representation's ETag, or a date: the whole blob, from byte 0.
    for other in ["\"nope\"", "W/\"weak\"", "Wed, 21 Oct 2015 07:28:00 GMT"] {
        let (status, h, body) = fetch(&app, &url, &[("range", "bytes=0-9"), ("if-range", other)]);
        assert_eq!(status, 200, "{other}");
        assert_eq!(Sha256Digest::of(&body), v.sha256, "{other}");
        assert!(header(&h, "content-range").is_none(), "{other}");
    }
}

#[test]
fn a_download_cut_short_counts_what_was_sent_not_what_was_asked() {
    use std::io::{Read as _, Write as _};
    let app = TestApp::start();
    let blob: Vec<u8> = (0..64u32 << 20).map(|i| (i % 251) as u8).collect();
    assert_eq!(app.put_blob(&blob), 201);
    let before = app.blob_bytes_served();
    // A client that reads 1 MiB of the 64 MiB and hangs up.
    let mut sock = std::net::TcpStream::connect(app.server.addr).expect("connect");
    let path = format!("/v1/blobs/sha256/{}", Sha256Digest::of(&blob).to_hex());
    write!(
        sock,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .expect("send");
    let mut got = vec![0u8; 1 << 20];
    sock.read_exact(&mut got).expect("read");
    drop(sock);
    // The server notices at its next writes; what it counts stays far below the blob.
    let mut counted = 0;
    ferry_tests::until("the cut answer is counted", || {
        counted = app.blob_bytes_served() - before;
        counted >= 1 << 20
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    counted = app.blob_bytes_served() - before;
    assert!(
        counted < 32 << 20,
        "{counted} bytes counted for a 1 MiB read"
    );
}

#[test]
fn a_blob_larger_than_a_map_window_is_served_exactly_whole_and_by_ranges_across_windows() {
    // 40 MiB and a few bytes: eleven 4 MiB windows of the local store's mapped path, the last
    // one short, each handed out in 128 KiB pieces.
    let app = TestApp::start();
    let size = (40usize << 20) + 12_345;
    let mut bytes = vec![0u8; size];
    let mut x: u32 = 0x2545_f491;
    for b in &mut bytes {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    let digest = Sha256Digest::of(&bytes);
    assert!(matches!(app.put_blob(&bytes), 200 | 201));
    let url = app.at(&format!("/v1/blobs/sha256/{}", digest.to_hex()));
    let served = app.blob_bytes_served();
    let (status, h, full) = fetch(&app, &url, &[]);
    assert_eq!(status, 200);
    assert_eq!(
        header(&h, "content-length"),
        Some(size.to_string().as_str())
    );
    assert_eq!(Sha256Digest::of(&full), digest);
    let w = 4usize << 20;
    let ranges = [
        (w - 3, w + 2),               // across the first window's end
        (w - (128 << 10), 2 * w + 7), // a piece boundary to past the second window
        (size - 5, size - 1),         // the short last window's tail
        (0, 0),                       // the first byte
    ];
    let mut ranged = 0;
    for (a, b) in ranges {
        let (status, h, body) = fetch(&app, &url, &[("range", &format!("bytes={a}-{b}"))]);
        assert_eq!(status, 206);
        assert_eq!(
            header(&h, "content-range"),
            Some(format!("bytes {a}-{b}/{size}").as_str())
        );
        assert_eq!(body, bytes[a..=b], "bytes {a}-{b}");
        ranged += b - a + 1;
    }
    // The byte counter counts what was sent, whole and ranged.
    assert_eq!(app.blob_bytes_served() - served, (size + ranged) as u64);
}
