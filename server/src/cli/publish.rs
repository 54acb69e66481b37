//! `ferry publish`: upload missing blobs with progress, then the release; idempotent on retry.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use ferry_shared::Sha256Digest;
use ferry_shared::manifest::ReleaseManifest;
use ferry_shared::trust::dsse::Envelope;

use super::bars::{Progress, upload_bar};
use super::remote::{content_length, http_agent, http_error};

/// How `ferry publish` reports and what it uploads besides the files.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PublishFlags {
    /// No progress bars.
    pub(crate) quiet: bool,
    /// One JSON line for the end.
    pub(crate) json: bool,
    /// Also upload each file's `ferry-grouped-zstd` encoding where it saves enough.
    pub(crate) compress: bool,
}

pub(crate) fn publish_cmd(
    release: &Path,
    files: &[PathBuf],
    server: &str,
    token: &str,
    ca: Option<&Path>,
    flags: PublishFlags,
) -> anyhow::Result<ExitCode> {
    let PublishFlags { json, compress, .. } = flags;
    let quiet = flags.quiet || json;
    // What was done, for --json.
    let mut blobs: Vec<serde_json::Value> = Vec::new();
    let say = |line: String| {
        if !json {
            println!("{line}");
        }
    };
    let finish = |state: &str, blobs: &[serde_json::Value], model: &str, version: &str| {
        if json {
            println!(
                "{}",
                serde_json::json!({"model": model, "version": version, "state": state, "blobs": blobs})
            );
        } else if state == "published" {
            println!("published {model} {version}");
        } else {
            println!("{model} {version} was already published (identical); nothing to do");
        }
    };
    let server = server.trim_end_matches('/');
    let raw =
        std::fs::read(release).with_context(|| format!("cannot read {}", release.display()))?;
    let envelope: Envelope = serde_json::from_slice(&raw)
        .with_context(|| {
            format!(
                "{} is not a signed release (make one with `ferry sign VARIANTS.toml --key release.key -o release.json`)",
                release.display()
            )
        })?;
    let payload = base64::engine::general_purpose::STANDARD
        .decode(envelope.payload.as_bytes())
        .context("the release payload is not base64")?;
    let manifest = ReleaseManifest::from_json(&payload)?;
    let agent = http_agent(ca)?;
    let auth = format!("Bearer {token}");
    // Before hashing or uploading anything: does the server trust the signer, may this token
    // publish, and is the version free (or this very release)? Already published: its blobs
    // are still checked (and a torn one uploaded again).
    let identical = check_first(&agent, server, &auth, &manifest, &raw)?;
    let (wanted, found) = locate(files, &manifest)?;
    let sealed = sealed_files(&manifest);
    let up = Uploader {
        agent: &agent,
        server,
        auth: &auth,
        quiet,
        compress,
        sealed: &sealed,
    };
    blobs.extend(upload_files(&up, files, &wanted, &found, &say)?);
    upload_chunk_indexes(&agent, server, &auth, &manifest, &found, &say)?;
    let (model, version) = (manifest.model.to_string(), manifest.version.to_string());
    if identical {
        finish("identical", &blobs, &model, &version);
        return Ok(ExitCode::SUCCESS);
    }
    let url = format!("{server}/v1/admin/models/{}/releases", manifest.model);
    let resp = agent
        .post(&url)
        .header("authorization", &auth)
        .header("content-type", "application/json")
        .send(&raw[..])
        .with_context(|| format!("cannot reach {server}"))?;
    if resp.status() == 201 {
        finish("published", &blobs, &model, &version);
        if !json {
            say_if_not_live(resp, &model, &version);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if resp.status() == 409 {
        // Idempotent retry: fine when the published release is this very release (perhaps
        // signed again); otherwise the server's refusal stands.
        let refusal = http_error("publish", resp);
        let url = format!(
            "{server}/v1/admin/models/{}/releases/{}",
            manifest.model, manifest.version
        );
        let mut got = agent.get(&url).header("authorization", &auth).call()?;
        if got.status() == 200 {
            let text = got
                .body_mut()
                .with_config()
                .limit(16 << 20)
                .read_to_string()?;
            let v: serde_json::Value = serde_json::from_str(&text)?;
            let same_payload = v["envelope"]["payload"].as_str() == Some(envelope.payload.as_str());
            // The same inputs signed again differ only in their `created` stamp.
            let same_content = v["envelope"]["payload"]
                .as_str()
                .and_then(|p| base64::engine::general_purpose::STANDARD.decode(p).ok())
                .and_then(|p| ReleaseManifest::from_json(&p).ok())
                .is_some_and(|m| m.same_content(&manifest));
            if same_payload || same_content {
                finish("identical", &blobs, &model, &version);
                return Ok(ExitCode::SUCCESS);
            }
        }
        return Err(refusal);
    }
    Err(http_error("publish", resp))
}

/// Uploads the chunk index of every file the release signs one for (made again from the
/// file, which must give the signed digest), unless the server has it.
fn upload_chunk_indexes(
    agent: &ureq::Agent,
    server: &str,
    auth: &str,
    manifest: &ReleaseManifest,
    found: &[FoundFile],
    say: &dyn Fn(String),
) -> anyhow::Result<()> {
    let mut refs: Vec<(
        Sha256Digest,
        String,
        ferry_shared::manifest::chunks::ChunkIndexRef,
    )> = Vec::new();
    for v in &manifest.variants {
        let files = std::iter::once((v.sha256, v.id.to_string(), v.chunk_index)).chain(
            v.side_files().map(|f| {
                (
                    f.sha256,
                    format!("{} (file {})", v.id, f.name),
                    f.chunk_index,
                )
            }),
        );
        for (digest, id, index) in files {
            if let Some(index) = index
                && !refs.iter().any(|r| r.2 == index)
            {
                refs.push((digest, id, index));
            }
        }
    }
    let sealed = sealed_files(manifest);
    for (digest, id, signed) in refs {
        let Some((_, path)) = found.iter().find(|(d, _)| *d == digest) else {
            bail!("variant {id}: no file has sha256 {digest}");
        };
        let index = if sealed.contains(&digest) {
            crate::release::sign::chunks::index_of_sealed_file(path)?
        } else {
            crate::release::sign::chunks::index_of_file(path)?
        };
        if index.reference() != signed {
            bail!(
                "variant {id}: the chunk index of {} is not the one the release signs (it was \
                 signed by another ferry version): sign the release again with this one",
                path.display()
            );
        }
        let url = format!("{server}/v1/blobs/sha256/{}", signed.sha256.to_hex());
        let head = agent
            .head(&url)
            .call()
            .with_context(|| format!("cannot reach {server}"))?;
        if head.status() == 200 {
            continue;
        }
        let put = format!("{server}/v1/admin/blobs/sha256/{}", signed.sha256.to_hex());
        let resp = agent
            .put(&put)
            .header("authorization", auth)
            .header("content-type", "application/octet-stream")
            .send(&index.to_bytes()[..])
            .with_context(|| format!("uploading the chunk index of {}", path.display()))?;
        if !resp.status().is_success() {
            return Err(http_error(
                &format!("upload of the chunk index of {}", path.display()),
                resp,
            ));
        }
        say(format!(
            "{id}: uploaded its chunk index ({} chunks, {} bytes)",
            index.chunks.len(),
            signed.size
        ));
    }
    Ok(())
}

/// Where `ferry publish` uploads, as whom, and how.
struct Uploader<'a> {
    agent: &'a ureq::Agent,
    server: &'a str,
    auth: &'a str,
    quiet: bool,
    compress: bool,
    /// The release's sealed files.
    sealed: &'a std::collections::HashSet<Sha256Digest>,
}

/// Uploads every file of `wanted` the server lacks (and its encoding, with `compress`): what
/// was done per file, for `--json`.
fn upload_files(
    up: &Uploader<'_>,
    files: &[PathBuf],
    wanted: &[WantedFile],
    found: &[FoundFile],
    say: &dyn Fn(String),
) -> anyhow::Result<Vec<serde_json::Value>> {
    let Uploader {
        agent,
        server,
        auth,
        quiet,
        compress,
        sealed,
    } = *up;
    let mut blobs = Vec::new();
    for (digest, size, variant, data_file) in wanted {
        // How the file is named in messages: the variant, or its data file.
        let id = &match data_file {
            Some(name) => format!("{variant} (file {name})"),
            None => variant.clone(),
        };
        let Some((_, path)) = found.iter().find(|(d, _)| d == digest) else {
            bail!(
                "variant {id}: no file in {} has sha256 {digest}",
                shown(files)
            );
        };
        // The file's entry for --json, with what was done about its compressed form.
        let entry = |uploaded: bool| -> anyhow::Result<serde_json::Value> {
            let mut e = serde_json::json!({"variant": variant, "sha256": digest, "size": size, "uploaded": uploaded});
            if let Some(name) = data_file {
                e["data_file"] = serde_json::json!(name);
            }
            // Ciphertext does not compress: a sealed file's encoding is not tried.
            if compress && !sealed.contains(digest) {
                let file = super::compress::ToEncode {
                    id,
                    digest: *digest,
                    size: *size,
                    path,
                };
                e["compressed"] =
                    super::compress::ensure_grouped_zstd(agent, server, auth, &file, quiet, say);
            }
            Ok(e)
        };
        let url = format!("{server}/v1/blobs/sha256/{}", digest.to_hex());
        let head = agent
            .head(&url)
            .call()
            .with_context(|| format!("cannot reach {server}"))?;
        let stored_size = content_length(&head);
        if head.status() == 200 && stored_size == Some(*size) {
            say(format!(
                "{id}: blob {} already on the server",
                digest.to_hex()
            ));
            blobs.push(entry(false)?);
            continue;
        }
        if head.status() == 200 {
            say(format!(
                "{id}: blob {} is on the server with {} bytes instead of {size}: uploading it again",
                digest.to_hex(),
                stored_size.map_or("an unknown number of".to_string(), |s| s.to_string())
            ));
        }
        let bar = upload_bar(quiet, *size, id);
        let file = std::fs::File::open(path)?;
        let mut reader = Progress {
            inner: file,
            bar: bar.clone(),
        };
        let put = format!("{server}/v1/admin/blobs/sha256/{}", digest.to_hex());
        let resp = agent
            .put(&put)
            .header("authorization", auth)
            .header("content-type", "application/octet-stream")
            .header("content-length", &size.to_string())
            .send(ureq::SendBody::from_reader(&mut reader))
            .with_context(|| format!("uploading {}", path.display()))?;
        bar.finish_and_clear();
        if !resp.status().is_success() {
            return Err(http_error(&format!("upload of {}", path.display()), resp));
        }
        say(format!("{id}: uploaded {} ({size} bytes)", path.display()));
        blobs.push(entry(true)?);
    }
    Ok(blobs)
}

pub(crate) fn hash_file(path: &Path) -> anyhow::Result<Sha256Digest> {
    let digest =
        ferry_fs::sha256_file(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Sha256Digest::from_bytes(digest))
}

/// A file the release names: digest, size, the variant, the data file's name (none for the
/// program).
type WantedFile = (Sha256Digest, u64, String, Option<String>);

/// A file found for a digest.
type FoundFile = (Sha256Digest, PathBuf);

/// Asks the server whether it would take the release before anything is uploaded: true when
/// this very release is already published.
fn check_first(
    agent: &ureq::Agent,
    server: &str,
    auth: &str,
    manifest: &ReleaseManifest,
    raw: &[u8],
) -> anyhow::Result<bool> {
    let check = format!(
        "{server}/v1/admin/models/{}/releases?check=true",
        manifest.model
    );
    let mut resp = agent
        .post(&check)
        .header("authorization", auth)
        .header("content-type", "application/json")
        .send(raw)
        .with_context(|| format!("cannot reach {server}"))?;
    if !resp.status().is_success() {
        return Err(http_error("publish (checked before uploading)", resp));
    }
    let checked: serde_json::Value =
        serde_json::from_reader(resp.body_mut().with_config().limit(64 * 1024).reader())
            .context("the server's check answer is not JSON")?;
    Ok(checked["state"] == "identical")
}

/// Every file the release names (a file several variants share once), and where in `files`
/// each is, found by size and then hash; an error naming every one that is absent.
/// The digests of the release's sealed files.
fn sealed_files(manifest: &ReleaseManifest) -> std::collections::HashSet<Sha256Digest> {
    manifest
        .variants
        .iter()
        .filter_map(|v| v.sealed.as_ref())
        .flat_map(|s| s.files.iter().map(|f| f.sha256))
        .collect()
}

/// The folders of `--files`, for messages.
fn shown(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn locate(
    files: &[PathBuf],
    manifest: &ReleaseManifest,
) -> anyhow::Result<(Vec<WantedFile>, Vec<FoundFile>)> {
    // Find each blob in the folder by size, then hash.
    // Programs and their data files; a file several variants share is uploaded once.
    // Each: digest, size, the variant, the data file's name (none for the program).
    let mut wanted: Vec<(Sha256Digest, u64, String, Option<String>)> = Vec::new();
    for v in &manifest.variants {
        let files = std::iter::once((v.sha256, v.size, v.id.to_string(), None)).chain(
            v.side_files()
                .map(|f| (f.sha256, f.size, v.id.to_string(), Some(f.name.clone()))),
        );
        for w in files {
            if !wanted.iter().any(|x| x.0 == w.0) {
                wanted.push(w);
            }
        }
    }
    let mut found: Vec<FoundFile> = Vec::new();
    let mut entries = Vec::new();
    for dir in files {
        for entry in
            std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?
        {
            entries.push(entry?.path());
        }
    }
    for path in entries {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() || !wanted.iter().any(|w| w.1 == meta.len()) {
            continue;
        }
        let digest = hash_file(&path)?;
        if wanted.iter().any(|w| w.0 == digest) {
            found.push((digest, path));
        }
    }
    // Every file must be here before anything is uploaded.
    let absent: Vec<String> = wanted
        .iter()
        .filter(|w| !found.iter().any(|(d, _)| *d == w.0))
        .map(|(digest, _, variant, data_file)| match data_file {
            Some(name) => format!("variant {variant} file {name} (sha256 {digest})"),
            None => format!("variant {variant} (sha256 {digest})"),
        })
        .collect();
    if !absent.is_empty() {
        let sealed = manifest.variants.iter().any(|v| v.sealed.is_some());
        bail!(
            "no file in {} has the bytes of: {}; nothing was uploaded{}",
            shown(files),
            absent.join(", "),
            if sealed {
                " (the release has sealed variants: their files are the NAME.<digest>.sealed \
                 files `ferry sign` wrote to --sealed-out; give that folder with another \
                 --files)"
            } else {
                ""
            }
        );
    }
    Ok((wanted, found))
}

/// Says so when the release just published is not live (a model's later release waits for a
/// rollout), from the server's answer.
fn say_if_not_live(resp: ureq::http::Response<ureq::Body>, model: &str, version: &str) {
    let live = resp
        .into_body()
        .read_to_string()
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["live"].as_bool());
    if live == Some(false) {
        println!(
            "{model} {version} is not live yet: no device gets it until a rollout stages it \
             (`ferry rollout start {model} --release {version} --percent 5`)"
        );
    }
}
