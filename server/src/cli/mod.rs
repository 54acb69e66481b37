//! The `ferry` command line: argument parsing and one module per command group.

mod deny;
mod health;
mod inspect;
mod keys;
mod publish;
mod releases;
mod remote;
mod rollout;
mod serve;
mod sign;

pub use keys::KeysCommand;
pub use remote::{Remote, http_agent};
pub use rollout::{RolloutCommand, SimpleRollout};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use health::health_cmd;
use inspect::inspect;
use keys::{keys_generate, keys_token};
use publish::publish_cmd;
use rollout::rollout_cmd;
use serve::serve;
use sign::sign_cmd;

use crate::app::config::Flags;

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
    /// Run the server (HTTP API for devices and ops).
    Serve {
        /// TOML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on (default 127.0.0.1:8080).
        #[arg(long)]
        listen: Option<String>,
        /// Data directory (default ./ferry-data).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Publish the built-in demo model `demo-mlp` on start.
        #[arg(long)]
        demo: bool,
    },
    /// Key management.
    Keys {
        /// What to do with keys.
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Build a release manifest from local `.pte` files and sign it with an offline release key.
    Sign {
        /// The VARIANTS.toml describing the release.
        variants: PathBuf,
        /// The release key file.
        #[arg(long)]
        key: PathBuf,
        /// Where to write the signed release.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Upload a signed release's blobs, then the release, to a server (idempotent on retry).
    Publish {
        /// The signed release (from `ferry sign`).
        release: PathBuf,
        /// Folder holding the release's `.pte` files.
        #[arg(long)]
        files: PathBuf,
        /// Where and who (a token with the `publish` scope).
        #[command(flatten)]
        remote: Remote,
        /// Do not draw progress bars.
        #[arg(long)]
        quiet: bool,
    },
    /// Staged rollouts: start, set, pause, resume, rollback, complete, status.
    Rollout {
        /// What to do.
        #[command(subcommand)]
        command: RolloutCommand,
    },
    /// Fleet health of a model: loads, failures, fallbacks per release, variant and device class.
    Health {
        /// Model name.
        model: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// The deny list: list, add, override, clear.
    Deny {
        /// What to do.
        #[command(subcommand)]
        command: deny::DenyCommand,
    },
    /// Every release of a model, newest first, with its state: live (the baseline), staged N%,
    /// published (not live yet) or retired (older than the baseline).
    Releases {
        /// Model name.
        model: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
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
        Command::Serve {
            config,
            listen,
            data,
            demo,
        } => serve(
            Flags {
                config,
                listen,
                data,
            },
            demo,
        ),
        Command::Keys { command } => match command {
            KeysCommand::Generate { out } => keys_generate(&out),
            KeysCommand::Token { name, scopes } => keys_token(&name, &scopes),
        },
        Command::Sign {
            variants,
            key,
            output,
        } => sign_cmd(&variants, &key, &output),
        Command::Publish {
            release,
            files,
            remote,
            quiet,
        } => {
            let (server, token, ca) = remote.resolve()?;
            publish_cmd(&release, &files, &server, &token, ca.as_deref(), quiet)
        }
        Command::Inspect { file, json } => inspect(&file, json),
        Command::Rollout { command } => rollout_cmd(command),
        Command::Health {
            model,
            json,
            remote,
        } => health_cmd(&model, json, &remote),
        Command::Deny { command } => deny::deny_cmd(command),
        Command::Releases {
            model,
            json,
            remote,
        } => releases::releases_cmd(&model, json, &remote),
    }
}
