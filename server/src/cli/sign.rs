//! `ferry sign`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use ferry_shared::trust::dsse::KeyRole;

use crate::keys;
use crate::release::sign;

/// Where sealing finds its keys and puts the sealed files (`--keys`, `--sealed-out`).
#[derive(Debug, Default)]
pub(crate) struct SealPaths<'a> {
    /// The key folder (default: the folder of `--key` when it is a file).
    pub(crate) keys: Option<&'a Path>,
    /// Where sealed files go (default: the VARIANTS.toml's folder).
    pub(crate) out: Option<&'a Path>,
}

pub(crate) fn sign_cmd(
    variants: &Path,
    key: &str,
    output: &Path,
    allow_regression: Option<&str>,
    seal_paths: SealPaths<'_>,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let spec = sign::read_variants(variants)?;
    // Opened first: a refused PIN or an unreachable signer stops before any work.
    let key_uri = key;
    let key = keys::signer::open(key)?;
    if let Some(role) = key.role()
        && role != KeyRole::Release
    {
        bail!(
            "{} is a {role} key; releases are signed with a release key",
            key.id(),
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
    let mut built = sign::build(&spec, base, &read, created)?;
    if spec.evaluation.is_some() {
        built.manifest.evaluation = Some(gate(&spec, base, allow_regression)?);
    }
    if spec.variants.iter().any(|v| v.is_sealed(&spec)) {
        let keys_dir = match seal_paths.keys {
            Some(d) => d.to_path_buf(),
            None => Path::new(key_uri)
                .parent()
                .filter(|_| Path::new(key_uri).is_file())
                .map(Path::to_path_buf)
                .context(
                    "sealed variants need the key folder (its keyring lists the server's \
                     key-release key): give it with --keys DIR",
                )?,
        };
        let (keys, notes) = sign::seal::seal_keys(&keys_dir)?;
        for n in notes {
            eprintln!("{n}");
        }
        let out = seal_paths.out.unwrap_or(base);
        let more = sign::seal::seal_variants(&mut built, &spec, &keys, out)?;
        built.warnings.extend(more);
    }
    built
        .manifest
        .validate(&ferry_shared::manifest::ManifestLimits::default())?;
    let sign::Built {
        manifest,
        files,
        warnings,
        ..
    } = built;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let envelope = sign::sign(&manifest, key.as_ref())?;
    let json = serde_json::to_vec_pretty(&envelope)?;
    ferry_fs::write(output, &json, ferry_fs::Mode::Public)
        .with_context(|| format!("cannot write {}", output.display()))?;
    if json_out {
        let out = serde_json::json!({
            "model": manifest.model,
            "version": manifest.version.to_string(),
            "key_id": key.id().to_string(),
            "output": output.display().to_string(),
            "warnings": warnings,
            "variants": manifest.variants.iter().zip(&files).map(|(v, f)| serde_json::json!({
                "id": v.id,
                "sealed": v.sealed.as_ref().map(|x| x.scheme.clone()),
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
                "assets": v.assets.iter().zip(&f.assets).map(|(e, d)| serde_json::json!({
                    "name": e.name,
                    "size": e.size,
                    "sha256": e.sha256,
                    "file": d.path.display().to_string(),
                })).collect::<Vec<_>>(),
                "labels": v.labels,
                "preprocess": v.preprocess,
                "evaluation": manifest.evaluation.as_ref().and_then(|e| e.results.get(v.id.as_str())),
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "signed {} {} with release key {}",
        manifest.model,
        manifest.version,
        key.id().short()
    );
    for (v, f) in manifest.variants.iter().zip(&files) {
        println!(
            "  {:<16} {:<9} {:>10} bytes  {}{}  [{}]",
            v.id.as_str(),
            v.delegate.to_string(),
            v.size,
            f.path.display(),
            if v.sealed.is_some() { " (sealed)" } else { "" },
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
        for (e, d) in v.assets.iter().zip(&f.assets) {
            let role = if v.labels.as_ref() == Some(&e.name) {
                "labels"
            } else {
                "asset"
            };
            println!(
                "  {:<16} {:<9} {:>10} bytes  {}  ({role} {})",
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

/// Runs the release's `[evaluation]` and refuses (`accuracy_regression`) when a variant fails
/// its bound, unless `allow` gives a reason, which is recorded with the failed variants.
#[cfg(feature = "executorch")]
fn gate(
    spec: &sign::VariantsFile,
    base: &Path,
    allow: Option<&str>,
) -> anyhow::Result<ferry_shared::manifest::Evaluation> {
    let report = crate::release::evaluate::run::evaluate(spec, base, &mut |_, _| {})?;
    let failed = report.failed();
    let mut evaluation = report.evaluation;
    if failed.is_empty() {
        return Ok(evaluation);
    }
    let reasons: Vec<String> = report
        .variants
        .iter()
        .filter(|v| v.result.passed == Some(false))
        .map(|v| {
            format!(
                "{}: {}",
                v.result.id,
                v.result.why_not.clone().unwrap_or_default()
            )
        })
        .collect();
    if allow.is_some_and(|r| r.trim().is_empty()) {
        bail!(super::exit::Usage(
            "--allow-regression needs a reason (it is signed into the release)".into()
        ));
    }
    match allow.map(str::trim) {
        Some(reason) => {
            eprintln!(
                "warning: signing despite failed evaluation ({}): {reason}",
                reasons.join("; ")
            );
            evaluation.override_ = Some(ferry_shared::manifest::EvaluationOverride {
                reason: reason.to_string(),
                failed,
            });
            Ok(evaluation)
        }
        None => Err(super::exit::EvaluationFailed(format!(
            "{}: {}; nothing was signed (fix the variant, or sign anyway with \
             --allow-regression REASON)",
            ferry_shared::errors::ErrorCode::AccuracyRegression.as_str(),
            reasons.join("; ")
        ))
        .into()),
    }
}

/// A `ferry` without the runtime cannot check accuracy, so it does not sign such a release.
#[cfg(not(feature = "executorch"))]
fn gate(
    _spec: &sign::VariantsFile,
    _base: &Path,
    _allow: Option<&str>,
) -> anyhow::Result<ferry_shared::manifest::Evaluation> {
    bail!(
        "this release has an [evaluation] section, and this ferry was built without the \
         ExecuTorch runtime, so it cannot run it: run scripts/setup-executorch.sh, then build \
         with `cargo build --release -p ferry-server --features executorch`"
    )
}
