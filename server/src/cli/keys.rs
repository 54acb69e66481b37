//! `ferry keys generate` and `ferry keys token`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;

use crate::app::keys;

/// `ferry keys ...`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a release key, an online key and trust.json in a folder.
    Generate {
        /// Folder to write into (created; existing keys are never overwritten).
        #[arg(long)]
        out: PathBuf,
    },
    /// Create an admin token: prints the secret once and the hash for the config file.
    Token {
        /// A name for logs.
        #[arg(long)]
        name: String,
        /// Comma-separated scopes: publish, rollout, read.
        #[arg(long, default_value = "publish,rollout,read")]
        scopes: String,
    },
}
pub(crate) fn keys_generate(out: &Path) -> anyhow::Result<ExitCode> {
    let (release, online, _) = keys::key_paths(out);
    for p in [&release, &online] {
        if p.exists() {
            bail!("{} exists; refusing to overwrite keys", p.display());
        }
    }
    for line in keys::ensure_dev_keys(out)? {
        println!("{line}");
    }
    println!("keep release.key offline; give trust.json to app developers");
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn keys_token(name: &str, scopes: &str) -> anyhow::Result<ExitCode> {
    let mut parsed = Vec::new();
    for s in scopes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let scope: crate::api::auth::Scope =
            serde_json::from_value(serde_json::Value::String(s.to_string()))
                .map_err(|_| anyhow::anyhow!("unknown scope {s:?}; use publish, rollout, read"))?;
        parsed.push(scope);
    }
    if parsed.is_empty() {
        bail!("give at least one scope");
    }
    let mut raw = [0u8; 24];
    getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let secret = format!("ferry_{}", hex::encode(raw));
    println!("token (shown once): {secret}");
    println!();
    println!("[[tokens]]");
    println!("name = {:?}", name);
    println!("sha256 = \"{}\"", crate::api::auth::hash_token(&secret));
    println!(
        "scopes = [{}]",
        parsed
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(ExitCode::SUCCESS)
}
