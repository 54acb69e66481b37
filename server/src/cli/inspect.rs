//! `ferry inspect FILE.pte`.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use ferry_shared::pte;

/// Largest file `ferry inspect` reads whole (the inspector itself only needs the program part).
pub(crate) const MAX_INSPECT_FILE: u64 = 8 << 30;
pub(crate) fn inspect(file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let meta =
        std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", file.display());
    }
    if meta.len() > MAX_INSPECT_FILE {
        bail!(
            "{} is larger than {} bytes",
            file.display(),
            MAX_INSPECT_FILE
        );
    }
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let report = pte::inspect(&bytes).map_err(|e| {
        anyhow::anyhow!("{} is not a valid .pte ({}): {e}", file.display(), e.code())
    })?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.to_text())?;
    }
    Ok(ExitCode::SUCCESS)
}
