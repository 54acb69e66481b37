//! `ferry inspect FILE.pte` (or a `.ptd` data file).

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
    if pte::is_ptd(&bytes) {
        return inspect_ptd(file, &bytes, json);
    }
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

/// `ferry inspect FILE.ptd`: the named tensors of a FlatTensor data file.
fn inspect_ptd(file: &Path, bytes: &[u8], json: bool) -> anyhow::Result<ExitCode> {
    let report = pte::inspect_ptd(bytes).map_err(|e| {
        anyhow::anyhow!("{} is not a valid .ptd ({}): {e}", file.display(), e.code())
    })?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "data file (.ptd), FlatTensor version {}: {} tensor(s), {} bytes of data",
            report.version,
            report.tensors.len(),
            report.data_bytes
        )?;
        for t in &report.tensors {
            writeln!(
                out,
                "  {:<40} {:<9} {:?}  {} bytes",
                t.key,
                pte::scalar_type_name(t.scalar_type),
                t.sizes,
                t.bytes
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
