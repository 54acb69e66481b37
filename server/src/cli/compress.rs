//! `ferry publish`'s second representation of each file: its `ferry-grouped-zstd` encoding
//! (`ferry_fs::grouped`), made here and uploaded when the server lacks it and it saves enough.
//! It is optional: when it cannot be made or uploaded, publishing goes on with a warning, and
//! devices download the file as it is.

use std::io::{BufReader, BufWriter, Seek as _, SeekFrom};
use std::path::Path;

use anyhow::Context as _;
use ferry_fs::grouped::CODING;
use ferry_shared::Sha256Digest;

use super::bars::{Progress, upload_bar};
use super::remote::{content_length, http_error};

/// An encoding is uploaded only when it is at most this share of the file (in percent): a
/// smaller saving is not worth a second copy on the store and CDNs.
const KEEP_AT_MOST_PERCENT: u64 = 95;

/// Sample blocks that save less than this (in percent) mean the file is not encoded at all.
const SAMPLES_AT_LEAST_PERCENT: f64 = 2.0;

/// One file of a release to encode.
pub(crate) struct ToEncode<'a> {
    /// How messages name it.
    pub(crate) id: &'a str,
    /// Its digest.
    pub(crate) digest: Sha256Digest,
    /// Its size.
    pub(crate) size: u64,
    /// Where it is.
    pub(crate) path: &'a Path,
}

/// Makes sure the server holds the `ferry-grouped-zstd` encoding of `file` when it saves at
/// least 5%: what was done, for `--json` (`encoding`, `size`, `uploaded`; `encoding` null when
/// the encoding would save too little or could not be uploaded, with `error` then). Never an
/// error: a failure is a warning on stderr.
pub(crate) fn ensure_grouped_zstd(
    agent: &ureq::Agent,
    server: &str,
    auth: &str,
    file: &ToEncode<'_>,
    quiet: bool,
    say: &dyn Fn(String),
) -> serde_json::Value {
    match try_ensure(agent, server, auth, file, quiet, say) {
        Ok(done) => done,
        Err(e) => {
            eprintln!(
                "warning: {}: its {CODING} encoding was not uploaded ({e:#}); devices download \
                 the file as it is (publish with --no-compress to skip this step)",
                file.id
            );
            serde_json::json!({"encoding": null, "size": null, "uploaded": false, "error": format!("{e:#}")})
        }
    }
}

fn try_ensure(
    agent: &ureq::Agent,
    server: &str,
    auth: &str,
    file: &ToEncode<'_>,
    quiet: bool,
    say: &dyn Fn(String),
) -> anyhow::Result<serde_json::Value> {
    let hex = file.digest.to_hex();
    let head = agent
        .head(format!("{server}/v1/blobs/sha256/{hex}"))
        .header("accept-encoding", CODING)
        .call()
        .with_context(|| format!("cannot reach {server}"))?;
    let held = head
        .headers()
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(CODING));
    if head.status() == 200 && held {
        let size = content_length(&head);
        say(format!(
            "{}: its {CODING} encoding is already on the server",
            file.id
        ));
        return Ok(serde_json::json!({"encoding": CODING, "size": size, "uploaded": false}));
    }
    let mut input = std::fs::File::open(file.path)
        .with_context(|| format!("cannot read {}", file.path.display()))?;
    let choice = ferry_fs::grouped::choose(&mut input, file.size)
        .with_context(|| format!("cannot read {}", file.path.display()))?;
    if choice.saving_percent() < SAMPLES_AT_LEAST_PERCENT {
        say(format!(
            "{}: not compressed (samples of it save {:.1}%)",
            file.id,
            choice.saving_percent()
        ));
        return Ok(serde_json::json!({"encoding": null, "size": null, "uploaded": false}));
    }
    let (encoded, len) = encode(file, input, choice.width, quiet)?;
    if len * 100 > file.size * KEEP_AT_MOST_PERCENT {
        say(format!(
            "{}: not compressed ({CODING} would save {:.1}%, under {}%)",
            file.id,
            saved(len, file.size),
            100 - KEEP_AT_MOST_PERCENT
        ));
        return Ok(serde_json::json!({"encoding": null, "size": len, "uploaded": false}));
    }
    let bar = upload_bar(quiet, len, &format!("{} ({CODING})", file.id));
    let mut reader = Progress {
        inner: encoded,
        bar: bar.clone(),
    };
    let mut resp = agent
        .put(format!("{server}/v1/admin/blobs/sha256/{hex}/grouped-zstd"))
        .header("authorization", auth)
        .header("content-type", "application/octet-stream")
        .header("content-length", &len.to_string())
        .send(ureq::SendBody::from_reader(&mut reader))
        .with_context(|| format!("uploading the {CODING} encoding of {}", file.path.display()))?;
    bar.finish_and_clear();
    if !resp.status().is_success() {
        return Err(http_error(
            &format!("upload of the {CODING} encoding of {}", file.path.display()),
            resp,
        ));
    }
    let answer: serde_json::Value = resp
        .body_mut()
        .with_config()
        .limit(64 << 10)
        .read_to_string()
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    if answer["created"] == false {
        say(format!(
            "{}: its {CODING} encoding was already on the server",
            file.id
        ));
        return Ok(
            serde_json::json!({"encoding": CODING, "size": answer["size"], "uploaded": false}),
        );
    }
    say(format!(
        "{}: uploaded its {CODING} encoding ({len} bytes, {:.1}% smaller)",
        file.id,
        saved(len, file.size)
    ));
    Ok(serde_json::json!({"encoding": CODING, "size": len, "uploaded": true}))
}

fn saved(len: u64, size: u64) -> f64 {
    100.0 * (1.0 - len as f64 / size.max(1) as f64)
}

/// The encoding of `file` (open as `input`) in an unnamed temporary file (in `TMPDIR`; gone
/// when dropped), rewound, and its length.
fn encode(
    file: &ToEncode<'_>,
    input: std::fs::File,
    width: u8,
    quiet: bool,
) -> anyhow::Result<(std::fs::File, u64)> {
    let bar = upload_bar(quiet, file.size, &format!("{} (compressing)", file.id));
    let reader = Progress {
        inner: BufReader::new(input),
        bar: bar.clone(),
    };
    let out =
        tempfile::tempfile().context("cannot make a temporary file to compress into (TMPDIR)")?;
    let out = ferry_fs::grouped::encode(reader, file.size, width, BufWriter::new(out))
        .with_context(|| format!("compressing {} into a temporary file", file.path.display()))?;
    bar.finish_and_clear();
    let mut out = out
        .into_inner()
        .map_err(|e| e.into_error())
        .context("cannot write the temporary file")?;
    let len = out.seek(SeekFrom::End(0))?;
    out.seek(SeekFrom::Start(0))?;
    Ok((out, len))
}
