//! Blob endpoints: `GET, HEAD /v1/blobs/sha256/{hex}` (single ranges, ETags, immutable caching)
//! and the admin upload `PUT /v1/admin/blobs/sha256/{hex}`.

use actix_web::http::{Method, StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use ferry_shared::errors::ErrorCode;
use futures_util::TryStreamExt as _;
use object_store::{GetOptions, GetRange, ObjectStoreExt as _};

use crate::api::AppState;
use crate::api::auth::authorize;
use crate::api::error::ApiError;
use crate::api::extract::parse_digest;
use crate::release::publish::{BlobOutcome, put_blob};
use crate::storage::StorageKey;
use crate::tokens::Scope;

/// A parsed single byte range, inclusive end.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RangeSpec {
    /// No usable Range header: send everything.
    Full,
    /// Bytes `start..=end`.
    Part(u64, u64),
    /// Cannot be satisfied.
    Unsatisfiable,
}

/// A byte position or length of a `Range` header: ASCII digits, any number of them (one past
/// what 64 bits hold is simply larger than any blob: `u64::MAX`); `None` for anything else.
fn position(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse::<u64>().unwrap_or(u64::MAX))
}

/// Parses a `Range` header for a resource of `size` bytes. Multiple ranges and malformed
/// headers are ignored (RFC 9110 allows serving the whole resource instead).
pub(crate) fn parse_range(value: Option<&str>, size: u64) -> RangeSpec {
    let Some(spec) = value.and_then(|v| v.trim().strip_prefix("bytes=")) else {
        return RangeSpec::Full;
    };
    if spec.contains(',') {
        return RangeSpec::Full;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return RangeSpec::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        let Some(n) = position(b) else {
            return RangeSpec::Full;
        };
        if n == 0 || size == 0 {
            return RangeSpec::Unsatisfiable;
        }
        return RangeSpec::Part(size.saturating_sub(n), size - 1);
    }
    let Some(start) = position(a) else {
        return RangeSpec::Full;
    };
    let end = if b.is_empty() {
        size.saturating_sub(1)
    } else {
        match position(b) {
            Some(e) if e >= start => e.min(size.saturating_sub(1)),
            _ => return RangeSpec::Full,
        }
    };
    if start >= size {
        return RangeSpec::Unsatisfiable;
    }
    RangeSpec::Part(start, end)
}

pub(crate) fn etag_matches(value: Option<&str>, etag: &str) -> bool {
    value.is_some_and(|v| {
        v.split(',').any(|t| {
            let t = t.trim();
            t == "*" || t == etag || t.strip_prefix("W/") == Some(etag)
        })
    })
}

/// The answer to a `GET` or `HEAD` of immutable bytes named by the strong `etag`, `size`
/// bytes long, before its body: the builder (status, validators, caching, `Content-Range`) and
/// the bytes `start..end` to send; or the whole answer when it needs no body (304, 416).
pub(crate) fn immutable_answer(
    req: &HttpRequest,
    etag: &str,
    size: u64,
    content_type: &str,
) -> Result<(actix_web::HttpResponseBuilder, u64, u64), Box<HttpResponse>> {
    let header_str =
        |name: header::HeaderName| req.headers().get(name).and_then(|v| v.to_str().ok());
    let builder = |status: StatusCode| {
        let mut b = HttpResponse::build(status);
        b.insert_header((header::ETAG, etag.to_string()))
            .insert_header((header::CACHE_CONTROL, "public, max-age=31536000, immutable"))
            .insert_header((header::ACCEPT_RANGES, "bytes"));
        b
    };
    if etag_matches(header_str(header::IF_NONE_MATCH), etag) {
        return Err(Box::new(builder(StatusCode::NOT_MODIFIED).finish()));
    }
    // A Range with an If-Range naming another representation gets the whole blob (RFC 9110:
    // the client's partial copy is of something else). Only the strong ETag matches; blobs are
    // immutable, so a date never does.
    let range_header = match header_str(header::IF_RANGE) {
        Some(v) if v.trim() != etag => None,
        _ => header_str(header::RANGE),
    };
    let (status, start, end) = match parse_range(range_header, size) {
        RangeSpec::Full => (StatusCode::OK, 0, size),
        RangeSpec::Part(a, b) => (StatusCode::PARTIAL_CONTENT, a, b + 1),
        RangeSpec::Unsatisfiable => {
            use actix_web::ResponseError as _;
            let mut resp = ApiError::new(
                ErrorCode::RangeNotSatisfiable,
                format!("the range asked for is outside the blob's {size} bytes"),
            )
            .error_response();
            if let Ok(v) = header::HeaderValue::from_str(&format!("bytes */{size}")) {
                resp.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return Err(Box::new(resp));
        }
    };
    let mut b = builder(status);
    b.content_type(content_type.to_string());
    if status == StatusCode::PARTIAL_CONTENT {
        b.insert_header((
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{size}", end - 1),
        ));
    }
    Ok((b, start, end))
}

/// Whether the request asks for the `ferry-grouped-zstd` encoding (named in `Accept-Encoding`
/// without `q=0`) of a whole blob (no `Range`: ranges are always of the blob's own bytes).
fn wants_grouped_zstd(req: &HttpRequest) -> bool {
    if req.headers().contains_key(header::RANGE) {
        return false;
    }
    req.headers()
        .get_all(header::ACCEPT_ENCODING)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let named = parts
                .next()
                .is_some_and(|c| c.eq_ignore_ascii_case(ferry_fs::grouped::CODING));
            // A quality that is not a number above 0 refuses the coding (q=0, q=abc, q=NaN).
            let refused = parts.any(|p| {
                let Some((name, q)) = p.split_once('=') else {
                    return false;
                };
                name.trim().eq_ignore_ascii_case("q")
                    && !q.trim().parse::<f32>().is_ok_and(|q| q > 0.0)
            });
            named && !refused
        })
}

/// The size of the object at `key`, and on the local store (for a GET) the open file to serve
/// it from.
async fn open_blob(
    state: &AppState,
    key: &object_store::path::Path,
    local: bool,
) -> Result<(u64, Option<std::fs::File>), object_store::Error> {
    if !local {
        return Ok((state.store().head(key).await?.size, None));
    }
    let got = state.store().get_opts(key, GetOptions::default()).await?;
    Ok(match got.payload {
        object_store::GetResultPayload::File(file, _) => (got.meta.size, Some(file)),
        object_store::GetResultPayload::Stream(_) => (got.meta.size, None),
    })
}

pub(crate) async fn get_blob(
    req: HttpRequest,
    state: web::Data<AppState>,
    hex: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let digest = parse_digest(&hex)?;
    let missing = |e: object_store::Error| match e {
        object_store::Error::NotFound { .. } => {
            ApiError::new(ErrorCode::BlobNotFound, format!("no blob {digest}"))
        }
        other => ApiError::unavailable(other),
    };
    // The local store: one open (with its stat) serves the whole answer from the file; other
    // stores: a HEAD for the size, then a ranged GET.
    let local = matches!(
        state.config().storage,
        crate::storage::config::StorageConfig::Local
    ) && req.method() != Method::HEAD;
    // The encoding when it was asked for and is stored; the blob's own bytes otherwise.
    let mut coded = None;
    if wants_grouped_zstd(&req) {
        let key = StorageKey::grouped_zstd(&digest);
        if let Ok(found) = open_blob(&state, &key, local).await {
            coded = Some((key, found));
        }
    }
    let encoded = coded.is_some();
    let (key, (size, opened)) = match coded {
        Some(c) => c,
        None => {
            let key = StorageKey::blob(&digest);
            let found = open_blob(&state, &key, local).await.map_err(missing)?;
            (key, found)
        }
    };
    let etag = if encoded {
        format!("\"{}.grouped-zstd\"", digest.to_hex())
    } else {
        format!("\"{}\"", digest.to_hex())
    };
    let (mut b, start, end) = match immutable_answer(&req, &etag, size, "application/octet-stream")
    {
        Ok(head) => head,
        Err(mut done) => {
            done.headers_mut().insert(
                header::VARY,
                header::HeaderValue::from_static("accept-encoding"),
            );
            return Ok(*done);
        }
    };
    // Caches keep the encoded and the plain answer apart.
    b.insert_header((header::VARY, "accept-encoding"));
    if encoded {
        b.insert_header((header::CONTENT_ENCODING, ferry_fs::grouped::CODING));
    }
    let len = end - start;
    if req.method() == Method::HEAD {
        // The body is never sent for HEAD, but its declared size becomes Content-Length.
        let empty = futures_util::stream::empty::<Result<Bytes, std::io::Error>>();
        return Ok(b.body(actix_web::body::SizedStream::new(len, empty)));
    }
    if encoded {
        state.metrics().grouped_zstd_answer();
    }
    let sent = state.metrics().blob_bytes_counter();
    let count = move |piece: &Bytes| {
        sent.inc_by(piece.len() as u64);
    };
    if let Some(file) = opened {
        return Ok(b
            .no_chunking(len)
            .streaming(mapped_pieces(file, start, end).inspect_ok(count)));
    }
    let opts = GetOptions {
        range: Some(GetRange::Bounded(start..end)),
        ..GetOptions::default()
    };
    let got = state
        .store()
        .get_opts(&key, opts)
        .await
        .map_err(ApiError::unavailable)?;
    let range = got.range.clone();
    match got.payload {
        // Only the local store hands out files, and those are mapped (above).
        object_store::GetResultPayload::File(file, _) => Ok(b
            .no_chunking(len)
            .streaming(mapped_pieces(file, range.start, range.end).inspect_ok(count))),
        object_store::GetResultPayload::Stream(stream) => {
            let stream = stream
                .map_err(|e| {
                    tracing::error!("blob stream failed: {e}");
                    std::io::Error::other(e.to_string())
                })
                .inspect_ok(count);
            Ok(b.no_chunking(len).streaming(stream))
        }
    }
}

/// The bytes of one response body handed to the HTTP writer at a time: at most the
/// connection's write buffer (`app/listen.rs`) and under actix's retention limit for it, so
/// the buffer is reused across pieces instead of being dropped and grown again for each.
const PIECE: usize = 128 << 10;

/// The most of a blob mapped at once (a window, mapped and read in before its first piece is
/// sent): bounds the time to the first byte of a cold file, the pages mapped per response and
/// what a reader that takes one byte makes the server read.
const WINDOW: u64 = 4 << 20;

/// Bytes `start..end` of a local store's blob file, a [`WINDOW`] at a time, as [`PIECE`]s.
/// Each window is mapped read-only with its pages read in (`MAP_POPULATE`) on the blocking
/// pool, so the connection's thread never waits on the disk, and then handed out in slices:
/// no read call and no buffer of ferry's own, the page cache's pages copied once, into the
/// connection's write buffer. (`sendfile` would spare that copy too, but actix's HTTP/1
/// writer copies every body chunk into its buffer, and owns the socket.)
pub(crate) fn mapped_pieces(
    file: std::fs::File,
    start: u64,
    end: u64,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    let file = std::sync::Arc::new(file);
    futures_util::stream::try_unfold(start, move |at| {
        let file = file.clone();
        async move {
            if at >= end {
                return Ok::<_, std::io::Error>(None);
            }
            let stop = end.min(at.saturating_add(WINDOW));
            let window = web::block(move || map_range(&file, at, stop))
                .await
                .map_err(std::io::Error::other)??;
            Ok(Some((pieces(window), stop)))
        }
    })
    .try_flatten()
}

/// Bytes `start..end` of `file`, mapped read-only with their pages read in. Blob files are
/// never changed in place (the local store writes a file aside and renames it over; deleting
/// one leaves a live map intact).
fn map_range(file: &std::fs::File, start: u64, end: u64) -> std::io::Result<Bytes> {
    if start >= end {
        return Ok(Bytes::new());
    }
    let len = usize::try_from(end - start).map_err(std::io::Error::other)?;
    #[allow(unsafe_code)]
    // SAFETY: the map is read-only, and the store never truncates or rewrites a blob file
    // (see above): the mapped bytes stay valid while the map lives.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(start)
            .len(len)
            .populate()
            .map(file)?
    };
    Ok(Bytes::from_owner(map))
}

/// `whole` as a stream of [`PIECE`]-byte slices (no copy).
fn pieces(whole: Bytes) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    let n = whole.len();
    futures_util::stream::iter(
        (0..n)
            .step_by(PIECE)
            .map(move |a| Ok(whole.slice(a..(a + PIECE).min(n)))),
    )
}

/// One of the server's upload slots (`limits.max_concurrent_uploads`; 429 when all are in
/// use), and whether an upload over a stored object checks it first (the local store) or
/// trusts it (object stores, whose writes are all-or-nothing).
fn upload_slot(
    state: &AppState,
) -> Result<
    (
        tokio::sync::SemaphorePermit<'_>,
        crate::release::publish::ExistingBlob,
    ),
    ApiError,
> {
    let Ok(slot) = state.upload_slots().try_acquire() else {
        return Err(ApiError::new(
            ErrorCode::RateLimited,
            format!(
                "{} blob uploads are running (limits.max_concurrent_uploads); retry when one ends",
                state.config().limits.max_concurrent_uploads
            ),
        ));
    };
    let existing = match state.config().storage {
        crate::storage::config::StorageConfig::Local => {
            crate::release::publish::ExistingBlob::Verify
        }
        _ => crate::release::publish::ExistingBlob::Trust,
    };
    Ok((slot, existing))
}

pub(crate) async fn put_blob_handler(
    req: HttpRequest,
    state: web::Data<AppState>,
    hex: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config().tokens, Scope::Publish)?;
    let digest = parse_digest(&hex)?;
    let max = state.config().limits.max_blob_bytes;
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > max
    {
        return Err(ApiError::new(
            ErrorCode::BlobTooLarge,
            format!("blob is {len} bytes; the limit is {max}"),
        ));
    }
    let (_slot, existing) = upload_slot(&state)?;
    let outcome = put_blob(
        state.store(),
        &digest,
        payload,
        max,
        state.config().limits.upload_time(),
        existing,
    )
    .await?;
    let (status, size, created) = match outcome {
        BlobOutcome::Created { size } => (StatusCode::CREATED, size, true),
        BlobOutcome::Existed { size } => (StatusCode::OK, size, false),
    };
    tracing::info!(caller = caller.name, %digest, size, created, "blob upload");
    Ok(HttpResponse::build(status).json(serde_json::json!({
        "sha256": digest.to_hex(),
        "size": size,
        "created": created,
    })))
}

/// `PUT /v1/admin/blobs/sha256/{hex}/grouped-zstd`: the `ferry-grouped-zstd` encoding of a
/// stored blob, kept when it decodes to exactly the blob's bytes and is smaller.
pub(crate) async fn put_grouped_zstd_handler(
    req: HttpRequest,
    state: web::Data<AppState>,
    hex: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let caller = authorize(&req, &state.config().tokens, Scope::Publish)?;
    let digest = parse_digest(&hex)?;
    let (_slot, existing) = upload_slot(&state)?;
    let outcome = crate::release::publish::encoded::put_grouped_zstd(
        state.store(),
        &digest,
        payload,
        state.config().limits.upload_time(),
        existing,
    )
    .await?;
    use crate::release::publish::encoded::EncodedOutcome;
    let (status, size, created) = match outcome {
        EncodedOutcome::Created { size } => (StatusCode::CREATED, size, true),
        EncodedOutcome::Existed { size } => (StatusCode::OK, size, false),
    };
    tracing::info!(caller = caller.name, %digest, size, created, "grouped-zstd upload");
    Ok(HttpResponse::build(status).json(serde_json::json!({
        "sha256": digest.to_hex(),
        "encoding": ferry_fs::grouped::CODING,
        "size": size,
        "created": created,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeSpec::*;
        assert_eq!(parse_range(None, 10), Full);
        assert_eq!(parse_range(Some("bytes=0-4"), 10), Part(0, 4));
        assert_eq!(parse_range(Some("bytes=5-"), 10), Part(5, 9));
        assert_eq!(parse_range(Some("bytes=-3"), 10), Part(7, 9));
        assert_eq!(parse_range(Some("bytes=-30"), 10), Part(0, 9));
        assert_eq!(parse_range(Some("bytes=8-100"), 10), Part(8, 9));
        assert_eq!(parse_range(Some("bytes=10-"), 10), Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=-0"), 10), Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=0-1,3-4"), 10), Full);
        assert_eq!(parse_range(Some("bytes=4-2"), 10), Full);
        assert_eq!(parse_range(Some("items=0-1"), 10), Full);
        assert_eq!(parse_range(Some("bytes=x-y"), 10), Full);
        // Positions past 64 bits are past any blob: a start there is unsatisfiable, an end
        // or a suffix length there reaches the blob's end (as bytes=8-100 does).
        assert_eq!(
            parse_range(Some("bytes=99999999999999999999999-"), 10),
            Unsatisfiable
        );
        assert_eq!(
            parse_range(Some("bytes=2-99999999999999999999999"), 10),
            Part(2, 9)
        );
        assert_eq!(
            parse_range(Some("bytes=-99999999999999999999999"), 10),
            Part(0, 9)
        );
        assert_eq!(parse_range(Some("bytes=+1-2"), 10), Full);
        assert_eq!(parse_range(Some("bytes=1-+2"), 10), Full);
    }

    #[test]
    fn the_encoding_is_sent_only_when_asked_for_with_a_positive_quality() {
        let asks = |headers: &[(&str, &str)]| {
            let mut r = actix_web::test::TestRequest::get();
            for (k, v) in headers {
                r = r.append_header((*k, *v));
            }
            wants_grouped_zstd(&r.to_http_request())
        };
        let ae = |v: &'static str| [("accept-encoding", v)];
        assert!(asks(&ae("ferry-grouped-zstd")));
        assert!(asks(&ae("gzip, FERRY-GROUPED-ZSTD;q=0.5")));
        assert!(asks(&[
            ("accept-encoding", "gzip"),
            ("accept-encoding", "ferry-grouped-zstd")
        ]));
        for refused in [
            "ferry-grouped-zstd;q=0",
            "ferry-grouped-zstd; Q=0.000",
            "ferry-grouped-zstd;q=abc",
            "ferry-grouped-zstd;q=NaN",
            "ferry-grouped-zstd;q=-1",
            "gzip, br",
            "ferry-grouped-zstdx",
            "*",
        ] {
            assert!(!asks(&ae(refused)), "{refused}");
        }
        assert!(!asks(&[]));
        // Ranges are always of the blob's own bytes.
        assert!(!asks(&[
            ("accept-encoding", "ferry-grouped-zstd"),
            ("range", "bytes=0-1")
        ]));
    }

    #[test]
    fn etags() {
        assert!(etag_matches(Some("\"ab\""), "\"ab\""));
        assert!(etag_matches(Some("W/\"ab\", \"cd\""), "\"ab\""));
        assert!(etag_matches(Some("*"), "\"ab\""));
        assert!(!etag_matches(Some("\"cd\""), "\"ab\""));
        assert!(!etag_matches(None, "\"ab\""));
    }
}
