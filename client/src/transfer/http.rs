//! What an HTTP answer says beyond its body: a ferry error's code and message, the `Date`
//! header, whether a request failed because the server cannot be reached.

/// ` (code: message)` of a ferry error answer (else empty), and its code when it is
/// `origin_unavailable` (the one 5xx code an app may act on: a site mirror's origin is away).
pub(crate) fn server_said(
    resp: &mut ureq::http::Response<ureq::Body>,
) -> (String, Option<ferry_shared::errors::ErrorCode>) {
    let (said, code) = server_said_code(resp);
    (
        said,
        code.filter(|c| *c == ferry_shared::errors::ErrorCode::OriginUnavailable),
    )
}

/// ` (code: message)` of a ferry error answer (else empty), and its code when it is one of
/// the catalogue's.
pub(crate) fn server_said_code(
    resp: &mut ureq::http::Response<ureq::Body>,
) -> (String, Option<ferry_shared::errors::ErrorCode>) {
    #[derive(serde::Deserialize)]
    struct Said {
        code: String,
        message: String,
    }
    let Some(s) = resp
        .body_mut()
        .with_config()
        .limit(64 << 10)
        .read_to_vec()
        .ok()
        .and_then(|b| serde_json::from_slice::<Said>(&b).ok())
    else {
        return (String::new(), None);
    };
    let message: String = s.message.chars().take(500).collect();
    let code = ferry_shared::errors::ErrorCode::parse(&s.code);
    (
        format!(
            " ({}: {message})",
            s.code.chars().take(64).collect::<String>()
        ),
        code,
    )
}

/// An HTTP `Date` header (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub(crate) fn http_date(value: &str) -> Option<time::OffsetDateTime> {
    let format = time::format_description::parse_borrowed::<1>(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT",
    )
    .ok()?;
    time::PrimitiveDateTime::parse(value.trim(), &format)
        .ok()
        .map(time::PrimitiveDateTime::assume_utc)
}

/// Whether `e` says the server cannot be reached at all (as opposed to a failure on the way
/// that a retry may get past): the connection was refused, could not be made or timed out
/// connecting, or the host does not resolve.
pub(crate) fn unreachable(e: &ureq::Error) -> bool {
    use std::io::ErrorKind as K;
    match e {
        ureq::Error::HostNotFound
        | ureq::Error::ConnectionFailed
        | ureq::Error::Timeout(ureq::Timeout::Resolve | ureq::Timeout::Connect) => true,
        ureq::Error::Io(io) => {
            matches!(
                io.kind(),
                K::ConnectionRefused
                    | K::NetworkUnreachable
                    | K::HostUnreachable
                    | K::AddrNotAvailable
            )
            // The standard library's name lookup failure (no kind of its own).
            || io.to_string().starts_with("failed to lookup address information")
        }
        _ => false,
    }
}
