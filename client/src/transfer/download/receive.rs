//! The body of one answer to a download's request: written into the part file as it comes,
//! decoded first when it is in the `ferry-grouped-zstd` encoding (`ferry_fs::grouped`), hashed
//! on the way.

use std::io::Write as _;
use std::path::Path;

use ferry_shared::Sha256Digest;
use sha2::{Digest as _, Sha256};

use super::copy::{Copied, CopyError, copy_hashing};
use super::part::{hash_prefix, open_at, truncate};
use crate::error::ClientError;

/// Whether an answer is in the `ferry-grouped-zstd` encoding.
pub(super) fn grouped_zstd(headers: &ureq::http::HeaderMap) -> bool {
    headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(ferry_fs::grouped::CODING))
}

/// Where an answer's body goes: `part`, from byte `have` on (0: the whole file), in the
/// `ferry-grouped-zstd` encoding when `coded`.
pub(super) struct Body<'a> {
    pub(super) part: &'a Path,
    pub(super) have: u64,
    pub(super) coded: bool,
    /// The signed size.
    pub(super) size: u64,
    /// How errors name the file.
    pub(super) id: &'a str,
}

/// What came of an answer's body.
pub(super) enum Received {
    /// The whole file is in `part` (synced), hashing to this.
    Whole(Sha256Digest),
    /// The body ended early (why); what arrived is kept.
    Short(String),
    /// An encoded body did not decode (why, and whether the encoding itself is at fault rather
    /// than the connection); what arrived was dropped when the encoding is at fault.
    Undecodable((String, bool)),
}

/// Writes an answer's body into the part file, decoding it when it is encoded, hashing it as
/// it goes.
pub(super) fn receive(
    resp: &mut ureq::http::Response<ureq::Body>,
    to: Body<'_>,
    mut progress: impl FnMut(u64),
) -> Result<Received, ClientError> {
    let Body {
        part,
        have: start,
        coded,
        size,
        id,
    } = to;
    let hasher = if start > 0 {
        hash_prefix(part, start)?
    } else {
        Sha256::new()
    };
    let mut file = open_at(part, start)?;
    let mut body = resp
        .body_mut()
        .with_config()
        .limit(size - start + 1)
        .reader();
    let mut decoder = None;
    let reader: &mut dyn std::io::Read = if coded {
        match decoding(&mut body, size) {
            Ok(d) => decoder.insert(d),
            Err(why) => return Ok(Received::Undecodable(why)),
        }
    } else {
        &mut body
    };
    let copied = copy_hashing(reader, &mut file, hasher, start, size, &mut progress);
    if let Some(d) = &decoder
        && d.format_failed()
    {
        drop(file);
        truncate(part)?;
        let why = copied
            .as_ref()
            .ok()
            .and_then(|c| c.stream_error.clone())
            .unwrap_or_default();
        return Ok(Received::Undecodable((
            format!("the encoded answer does not decode: {why}"),
            true,
        )));
    }
    let Copied {
        written,
        hasher,
        stream_error,
    } = match copied {
        Ok(c) => c,
        Err(CopyError::TooLong) => {
            drop(file);
            truncate(part)?;
            return Err(ClientError::SizeMismatch {
                variant: id.to_string(),
                message: format!("the server sent more than the signed {size} bytes"),
            });
        }
        Err(CopyError::Write(e)) => return Err(ClientError::io(part, e)),
    };
    file.flush().map_err(|e| ClientError::io(part, e))?;
    if written < size {
        return Ok(Received::Short(stream_error.unwrap_or_else(|| {
            format!("connection closed at byte {written} of {size}")
        })));
    }
    file.sync_all().map_err(|e| ClientError::io(part, e))?;
    Ok(Received::Whole(Sha256Digest::from_bytes(
        hasher.finalize().into(),
    )))
}

/// A decoder of an encoded answer's body, its header read: why not, and whether the encoding
/// itself is at fault (not the connection).
fn decoding(
    body: &mut dyn std::io::Read,
    size: u64,
) -> Result<ferry_fs::grouped::Decoder<std::io::BufReader<&mut dyn std::io::Read>>, (String, bool)>
{
    let d = ferry_fs::grouped::Decoder::new(std::io::BufReader::with_capacity(128 << 10, body))
        .map_err(|e| {
            let format = e.kind() == std::io::ErrorKind::InvalidData;
            (e.to_string(), format)
        })?;
    let len = d.header().len;
    if len != size {
        return Err((
            format!("the encoded answer is of {len} bytes; the signed manifest says {size}"),
            true,
        ));
    }
    Ok(d)
}
