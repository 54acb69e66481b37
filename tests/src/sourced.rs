//! HTTP requests from a chosen loopback source address. Linux routes all of 127.0.0.0/8 to
//! the loopback interface, so a test can be many client networks on one host: a connection
//! bound to 127.0.3.1 reaches the server from the network 127.0.3.0/24, a real peer address,
//! not a header.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr};

/// One request's answer: the status and the body read as JSON (`Null` when it is not).
pub type Answer = (u16, serde_json::Value);

/// POSTs `body` as JSON to `path` of `base` (`http://host:port`) over a connection from
/// `source`, with the extra `headers`.
pub fn post_json(
    source: IpAddr,
    base: &str,
    path: &str,
    body: &serde_json::Value,
    headers: &[(&str, &str)],
) -> Answer {
    let body = serde_json::to_vec(body).expect("json");
    let hostport = base
        .strip_prefix("http://")
        .expect("an http:// base URL")
        .trim_end_matches('/');
    let server: SocketAddr = hostport.parse().expect("host:port");
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket
        .bind(&SocketAddr::new(source, 0).into())
        .expect("bind the source address");
    socket.connect(&server.into()).expect("connect");
    let mut stream: std::net::TcpStream = socket.into();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write head");
    stream.write_all(&body).expect("write body");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read answer");
    parse(&raw)
}

/// Reads an HTTP/1.1 answer (a `Content-Length` or chunked body, or one up to the close).
fn parse(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an answer head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (
        status,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// The data of a chunked body.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 || rest.len() < eol + 2 + size {
            return out;
        }
        out.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
        rest = &rest[(eol + 4 + size).min(rest.len())..];
    }
}
