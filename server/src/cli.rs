//! The `ferry` command line: argument parsing and the subcommands.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use ferry_shared::pte;

/// ferry: deliver signed ExecuTorch models to devices.
#[derive(Debug, Parser)]
#[command(name = "ferry", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a `.pte` program really contains: methods, delegate calls per backend and
    /// the kernel calls left on portable kernels.
    Inspect {
        /// The `.pte` file.
        file: PathBuf,
        /// Print the report as JSON (for tools) instead of a table (for people).
        #[arg(long)]
        json: bool,
    },
}

/// Largest file `ferry inspect` reads whole (the inspector itself only needs the program part).
const MAX_INSPECT_FILE: u64 = 8 << 30;

/// Parses the process arguments, runs the command and maps errors to a one-line message.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let mut msg = format!("ferry: {e}");
            for cause in e.chain().skip(1) {
                msg.push_str(&format!(": {cause}"));
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one parsed command.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Inspect { file, json } => inspect(&file, json),
    }
}

fn inspect(file: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let meta =
        std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?;
    if !meta.is_file() {
        anyhow::bail!("{} is not a regular file", file.display());
    }
    if meta.len() > MAX_INSPECT_FILE {
        anyhow::bail!(
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
