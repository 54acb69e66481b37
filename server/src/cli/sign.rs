//! `ferry sign`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use ferry_shared::dsse::KeyRole;

use crate::keys;
use crate::release::sign;

pub(crate) fn sign_cmd(
    variants: &Path,
    key: &Path,
    output: &Path,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let spec = sign::read_variants(variants)?;
    let key = keys::load(key)?;
    if key.role != KeyRole::Release {
        bail!(
            "{} is a {} key; releases are signed with a release key",
            key.pair.id(),
            key.role
        );
    }
    let base = variants.parent().unwrap_or(Path::new("."));
    let read = |p: &Path| -> anyhow::Result<Vec<u8>> { Ok(std::fs::read(p)?) };
    // Reproducible builds: the same inputs and SOURCE_DATE_EPOCH sign to the same bytes
    // (ed25519 signatures are deterministic). Without it the manifest is stamped now.
    let created = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
            .with_context(|| format!("SOURCE_DATE_EPOCH {v:?} is not a unix time in seconds"))?,
        Err(_) => time::OffsetDateTime::now_utc(),
    };
    let (manifest, files) = sign::build_manifest(&spec, base, &read, created)?;
    for w in sign::contract_warnings(&manifest) {
        eprintln!("warning: {w}");
    }
    let envelope = sign::sign(&manifest, &key)?;
    let json = serde_json::to_vec_pretty(&envelope)?;
    ferry_fs::write(output, &json, ferry_fs::Mode::Public)
        .with_context(|| format!("cannot write {}", output.display()))?;
    if json_out {
        let out = serde_json::json!({
            "model": manifest.model,
            "version": manifest.version.to_string(),
            "key_id": key.pair.id().to_string(),
            "output": output.display().to_string(),
            "variants": manifest.variants.iter().zip(&files).map(|(v, f)| serde_json::json!({
                "id": v.id,
                "delegate": v.delegate,
                "size": v.size,
                "sha256": v.sha256,
                "file": f.path.display().to_string(),
                "backends": v.backends,
                "data": v.extra_files.iter().zip(&f.data).map(|(e, d)| serde_json::json!({
                    "name": e.name,
                    "size": e.size,
                    "sha256": e.sha256,
                    "file": d.path.display().to_string(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "signed {} {} with release key {}",
        manifest.model,
        manifest.version,
        key.pair.id().short()
    );
    for (v, f) in manifest.variants.iter().zip(&files) {
        println!(
            "  {:<16} {:<9} {:>10} bytes  {}  [{}]",
            v.id.as_str(),
            v.delegate.to_string(),
            v.size,
            f.path.display(),
            v.backends
                .iter()
                .map(|b| b.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for (e, d) in v.extra_files.iter().zip(&f.data) {
            println!(
                "  {:<16} {:<9} {:>10} bytes  {}  (data file {})",
                "",
                "",
                e.size,
                d.path.display(),
                e.name
            );
        }
    }
    println!("wrote {}", output.display());
    Ok(ExitCode::SUCCESS)
}
