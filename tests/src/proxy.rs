//! A loopback HTTP proxy with scripted faults, for testing the client against bad networks
//! and malicious servers.
//!
//! Each connection carries one request (the proxy answers `Connection: close`). Requests are
//! forwarded to the real server; blob responses (`/v1/blobs/...`), resolve responses and keyring
//! responses can be altered by the next [`Fault`] in the script. Every request is logged with its `Range`
//! header so tests can check how the client resumed.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to do to one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Forward unchanged.
    Pass,
    /// Send the headers and only the first `n` body bytes, then close.
    CutAt(usize),
    /// Drop the request's `Range` header (the server answers 200 with the whole blob).
    IgnoreRange,
    /// Flip one bit of body byte `n` (counted in the body sent).
    FlipByte(usize),
    /// Send `n` body bytes, then stall for the duration, then close.
    Stall(usize, Duration),
    /// Send the body in chunks of `n` bytes with a pause after each.
    Trickle(usize, Duration),
    /// Send the status and headers, hold the body back this long, then send it whole.
    Delay(Duration),
    /// Serve these bytes instead of the blob (a swapped blob), with a matching length.
    Replace(Vec<u8>),
    /// Change the release manifest inside a resolve response without re-signing it.
    TamperRelease,
    /// Answer a `Range` request with other bytes of the blob (the range moved by 1 MiB) while
    /// claiming the range asked for in `Content-Range`: a lying range answer.
    LieRange,
    /// Answer 503.
    Unavailable,
    /// Send the real status and headers, then a body that never ends (no length, filler bytes
    /// until the client hangs up, or 1 GiB): the "endless data" attack.
    Endless,
}

/// One logged request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// Method and path.
    pub line: String,
    /// The `Range` header, if any.
    pub range: Option<String>,
}

#[derive(Default)]
struct Shared {
    blob_faults: VecDeque<Fault>,
    resolve_faults: VecDeque<Fault>,
    keyring_faults: VecDeque<Fault>,
    release_faults: VecDeque<Fault>,
    log: Vec<Logged>,
}

/// The proxy.
pub struct FaultProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
}

impl FaultProxy {
    /// Starts a proxy in front of `upstream` (host:port).
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("addr");
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = handle(conn, upstream, &s);
                });
            }
        });
        FaultProxy { addr, shared, stop }
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues faults for the next blob responses, in order.
    pub fn blob_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        if let Ok(mut g) = self.shared.lock() {
            g.blob_faults.extend(faults);
        }
    }

    /// Queues faults for the next resolve responses, in order.
    pub fn resolve_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        if let Ok(mut g) = self.shared.lock() {
            g.resolve_faults.extend(faults);
        }
    }

    /// Queues faults for the next keyring responses (`GET /v1/keyring`), in order.
    pub fn keyring_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        if let Ok(mut g) = self.shared.lock() {
            g.keyring_faults.extend(faults);
        }
    }

    /// Queues faults for the next signed release manifest fetches (`/v1/releases/...`).
    pub fn release_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        if let Ok(mut g) = self.shared.lock() {
            g.release_faults.extend(faults);
        }
    }

    /// Drops every queued fault: responses pass unchanged from now on.
    pub fn clear_faults(&self) {
        if let Ok(mut g) = self.shared.lock() {
            g.blob_faults.clear();
            g.resolve_faults.clear();
            g.keyring_faults.clear();
            g.release_faults.clear();
        }
    }

    /// Requests seen so far.
    pub fn log(&self) -> Vec<Logged> {
        self.shared
            .lock()
            .map(|g| g.log.clone())
            .unwrap_or_default()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

fn read_head(r: &mut BufReader<TcpStream>) -> std::io::Result<(String, Vec<(String, String)>)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    Ok((line.trim_end().to_string(), headers))
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn handle(conn: TcpStream, upstream: SocketAddr, shared: &Mutex<Shared>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let (line, mut headers) = read_head(&mut reader)?;
    let len: usize = header(&headers, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let is_blob = path.starts_with("/v1/blobs/");
    let is_resolve = path.starts_with("/v1/resolve");
    let fault = {
        let mut g = shared
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?;
        g.log.push(Logged {
            line: line.clone(),
            range: header(&headers, "range").map(str::to_string),
        });
        let q = if is_blob {
            Some(&mut g.blob_faults)
        } else if is_resolve {
            Some(&mut g.resolve_faults)
        } else if path.starts_with("/v1/keyring") {
            Some(&mut g.keyring_faults)
        } else if path.starts_with("/v1/releases/") {
            Some(&mut g.release_faults)
        } else {
            None
        };
        q.and_then(|q| q.pop_front()).unwrap_or(Fault::Pass)
    };
    let mut out = conn;
    if fault == Fault::Unavailable {
        out.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )?;
        return Ok(());
    }
    if fault == Fault::IgnoreRange {
        headers.retain(|(k, _)| k != "range" && k != "if-range");
    }
    // The range the client asked for, when the answer is to lie about it.
    let mut asked = None;
    if fault == Fault::LieRange
        && let Some((a, b)) = header(&headers, "range")
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
    {
        let (x, y) = if a >= 1 << 20 {
            (a - (1 << 20), b - (1 << 20))
        } else {
            (a + (1 << 20), b + (1 << 20))
        };
        headers.retain(|(k, _)| k != "range");
        headers.push(("range".into(), format!("bytes={x}-{y}")));
        asked = Some((a, b));
    }
    // Forward.
    let mut up = TcpStream::connect(upstream)?;
    let mut req = format!("{line}\r\n");
    for (k, v) in &headers {
        if k != "connection" {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    req.push_str("connection: close\r\n\r\n");
    up.write_all(req.as_bytes())?;
    up.write_all(&body)?;
    let mut ur = BufReader::new(up);
    let (status_line, mut resp_headers) = read_head(&mut ur)?;
    if let Some((a, b)) = asked {
        for (k, v) in &mut resp_headers {
            if k == "content-range"
                && let Some((_, total)) = v.split_once('/')
            {
                *v = format!("bytes {a}-{b}/{total}");
            }
        }
    }
    let mut resp_body = Vec::new();
    ur.read_to_end(&mut resp_body)?;
    if resp_headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        resp_body = dechunk(&resp_body);
    }
    match &fault {
        Fault::Replace(bytes) => resp_body = bytes.clone(),
        Fault::FlipByte(n) if *n < resp_body.len() => resp_body[*n] ^= 0x01,
        Fault::TamperRelease => resp_body = tamper(&resp_body),
        _ => {}
    }
    // The upstream head without its framing headers; the length (if any) is the proxy's.
    let head = |length: Option<usize>| {
        let mut head = format!("{status_line}\r\n");
        for (k, v) in &resp_headers {
            if k != "content-length" && k != "connection" && k != "transfer-encoding" {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        if let Some(n) = length {
            head.push_str(&format!("content-length: {n}\r\n"));
        }
        head.push_str("connection: close\r\n\r\n");
        head
    };
    if fault == Fault::Endless {
        out.write_all(head(None).as_bytes())?;
        out.write_all(&resp_body)?;
        let filler = vec![b' '; 64 << 10];
        for _ in 0..(1 << 14) {
            out.write_all(&filler)?;
        }
        return Ok(());
    }
    out.write_all(head(Some(resp_body.len())).as_bytes())?;
    match fault {
        Fault::CutAt(n) => {
            out.write_all(&resp_body[..n.min(resp_body.len())])?;
        }
        Fault::Stall(n, d) => {
            out.write_all(&resp_body[..n.min(resp_body.len())])?;
            out.flush()?;
            std::thread::sleep(d);
        }
        Fault::Delay(d) => {
            out.flush()?;
            std::thread::sleep(d);
            out.write_all(&resp_body)?;
        }
        Fault::Trickle(n, d) => {
            for chunk in resp_body.chunks(n.max(1)) {
                out.write_all(chunk)?;
                out.flush()?;
                std::thread::sleep(d);
            }
        }
        _ => out.write_all(&resp_body)?,
    }
    out.flush()?;
    let _ = out.shutdown(std::net::Shutdown::Both);
    Ok(())
}

fn dechunk(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let Some(end) = b[i..].windows(2).position(|w| w == b"\r\n") else {
            break;
        };
        let size = usize::from_str_radix(
            std::str::from_utf8(&b[i..i + end]).unwrap_or("0").trim(),
            16,
        )
        .unwrap_or(0);
        i += end + 2;
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[i..(i + size).min(b.len())]);
        i += size + 2;
    }
    out
}

/// Tampers with a release in transit: in a signed release manifest envelope (`/v1/releases/`),
/// rewrites the manifest (keeping its signature); in a resolve answer, points the release
/// reference at other bytes (the signed decision still names the real ones).
fn tamper(body: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return body.to_vec();
    };
    if v.get("release_ref").is_some() {
        v["release_ref"]["sha256"] =
            serde_json::json!(ferry_shared::Sha256Digest::of(b"tampered").to_hex());
        return serde_json::to_vec(&v).unwrap_or_default();
    }
    let Some(payload) = v["payload"].as_str().and_then(|p| b64.decode(p).ok()) else {
        return body.to_vec();
    };
    let Ok(mut m) = serde_json::from_slice::<serde_json::Value>(&payload) else {
        return body.to_vec();
    };
    m["notes"] = serde_json::json!("tampered in transit");
    v["payload"] = serde_json::json!(b64.encode(serde_json::to_vec(&m).unwrap_or_default()));
    serde_json::to_vec(&v).unwrap_or_default()
}
