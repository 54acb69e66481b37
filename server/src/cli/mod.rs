//! The `ferry` command line: argument parsing and one module per command group.
//!
//! Top layer: may import every module.

mod bars;
mod compress;
mod deny;
mod evaluate;
mod examples;
pub mod exit;
mod experiment;
mod fleet;
mod health;
mod inspect;
mod keys;
mod mirror;
mod models;
mod ops;
mod publish;
mod release;
mod releases;
mod remote;
mod resolve;
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
use keys::{keys_encrypt, keys_generate, keys_rotate, keys_token};
use publish::publish_cmd;
use rollout::rollout_cmd;
use serve::serve;
use sign::sign_cmd;

use crate::app::config::Flags;

/// ferry: deliver signed ExecuTorch models to devices.
#[derive(Debug, Parser)]
#[command(
    name = "ferry",
    version,
    about,
    after_help = "Exit codes: 0 ok, 1 other failure, 2 usage, 3 auth (no token, unknown token, \
                  missing scope; a signing token's PIN refused or locked), 4 not found, \
                  5 conflict, 6 refused by the server's rules, 7 server, network or signer \
                  unavailable (a PKCS#11 library or token, an exec: signer), 8 evaluation \
                  failed. See docs/cli.md."
)]
pub struct Cli {
    /// Print JSON for scripts instead of text for people (every command; `serve` logs JSON).
    #[arg(long, global = true)]
    pub json: bool,
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
        #[arg(long, value_hint = clap::ValueHint::FilePath)]
        config: Option<PathBuf>,
        /// Address to listen on (default 127.0.0.1:8080).
        #[arg(long)]
        listen: Option<String>,
        /// Data directory (default ./ferry-data).
        #[arg(long, value_hint = clap::ValueHint::DirPath)]
        data: Option<PathBuf>,
        /// Publish the built-in demo model `demo-mlp` on start.
        #[arg(long, conflicts_with = "mirror_of")]
        demo: bool,
        /// Run as a read-only site mirror of the origin at this URL (docs/operations.md, "A
        /// site mirror"): devices of the site point at the mirror.
        #[arg(long, value_name = "URL", requires = "trust")]
        mirror_of: Option<String>,
        /// The trust file apps pin (the origin's trust.json), for --mirror-of.
        #[arg(long, value_name = "FILE", requires = "mirror_of", value_hint = clap::ValueHint::FilePath)]
        trust: Option<PathBuf>,
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
        /// The release key: a key file, a PKCS#11 URI (pkcs11:token=…;object=…?module-path=…
        /// &pin-source=…) or exec:COMMAND (docs/keys.md).
        #[arg(long, value_name = "KEY")]
        key: String,
        /// Where to write the signed release.
        #[arg(short = 'o', long = "output", value_hint = clap::ValueHint::FilePath)]
        output: PathBuf,
        /// Sign even though a variant failed its `[evaluation]` bound; the reason is recorded
        /// in the signed manifest.
        #[arg(long, value_name = "REASON")]
        allow_regression: Option<String>,
        /// For sealed variants: the key folder whose keyring names the server's key-release
        /// key and which keeps the seal secret (default: the folder of --key).
        #[arg(long, value_hint = clap::ValueHint::DirPath)]
        keys: Option<PathBuf>,
        /// For sealed variants: where to write the sealed files, `NAME.<digest>.sealed`
        /// (default: the VARIANTS.toml's folder); publish them with --files.
        #[arg(long, value_hint = clap::ValueHint::DirPath)]
        sealed_out: Option<PathBuf>,
    },
    /// Upload a signed release's blobs, then the release, to a server (idempotent on retry).
    Publish {
        /// The signed release (from `ferry sign`).
        release: PathBuf,
        /// Folder holding the release's `.pte` programs and `.ptd` data files (found by digest,
        /// so their names do not matter); give it again for more folders (the sealed files
        /// `ferry sign --sealed-out` wrote, for one).
        #[arg(long, value_hint = clap::ValueHint::DirPath, required = true)]
        files: Vec<PathBuf>,
        /// Where and who (a token with the `publish` scope).
        #[command(flatten)]
        remote: Remote,
        /// Do not draw progress bars.
        #[arg(long)]
        quiet: bool,
        /// Upload the files only as they are: no ferry-grouped-zstd encoding (by default each
        /// file's encoding is made and uploaded too when it saves at least 5%, and devices
        /// download it instead for a first install).
        #[arg(long)]
        no_compress: bool,
    },
    /// Staged rollouts: start, set, pause, resume, rollback, complete, status.
    Rollout {
        /// What to do.
        #[command(subcommand)]
        command: RolloutCommand,
    },
    /// Experiments: compare two releases or variants on the same kind of devices, with
    /// results you can trust while you watch them.
    Experiment {
        /// What to do.
        #[command(subcommand)]
        command: experiment::ExperimentCommand,
    },
    /// Fleet health of a model: loads, failures, fallbacks and native crashes per release,
    /// variant and device class.
    Health {
        /// Model name.
        model: String,
        /// Only what was reported in a window: a duration back from now (`30m`, `1h`, `7d`),
        /// an RFC 3339 time, or `step` (since the current rollout step began).
        #[arg(long, value_hint = clap::ValueHint::Other)]
        since: Option<String>,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Who is in the field: devices by protocol version and SDK.
    Fleet {
        /// What to show.
        #[command(subcommand)]
        command: fleet::FleetCommand,
    },
    /// A site mirror: fill it ahead of a rollout (`ferry serve --mirror-of` runs one).
    Mirror {
        /// What to do.
        #[command(subcommand)]
        command: mirror::MirrorCommand,
    },
    /// The deny list: list, add, override, clear.
    Deny {
        /// What to do.
        #[command(subcommand)]
        command: deny::DenyCommand,
    },
    /// Release actions: revoke; stop the key releases of a sealed release; who got its keys.
    Release {
        /// What to do.
        #[command(subcommand)]
        command: release::ReleaseCommand,
    },
    /// Every published model: its live release, the staged one and its share, the rollout's
    /// state, how many releases and deny entries it has.
    Models {
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Which variant a device would get, and why each variant is offered or left out (the
    /// server's explain). The device comes from flags or a JSON profile (`--profile`).
    Resolve {
        /// Model name.
        model: String,
        /// The device.
        #[command(flatten)]
        device: resolve::DeviceArgs,
        /// Where (no token needed).
        #[command(flatten)]
        remote: Remote,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Every release of a model, newest first, with its state: live (the baseline), staged N%,
    /// published (not live yet), retired (older than the baseline) or revoked.
    Releases {
        /// Model name.
        model: String,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// The operators an app's runtime needs for a model (ExecuTorch selective build): for one
    /// release, or for every release not revoked whose variants' app range includes an app
    /// version (what that app may receive).
    Ops {
        /// Model name.
        model: String,
        /// One release.
        #[arg(long, conflicts_with = "app_version", value_hint = clap::ValueHint::Other)]
        release: Option<String>,
        /// Every release an app of this version may receive.
        #[arg(long, value_hint = clap::ValueHint::Other)]
        app_version: Option<String>,
        /// Only this variant.
        #[arg(long, value_hint = clap::ValueHint::Other)]
        variant: Option<String>,
        /// Leave out (with a warning) variants signed before ferry recorded operators, instead
        /// of failing.
        #[arg(long)]
        skip_unknown: bool,
        /// `list`: one comma-separated line (EXECUTORCH_SELECT_OPS_LIST); `yaml`: `- op:`
        /// entries (EXECUTORCH_SELECT_OPS_YAML).
        #[arg(long, value_enum, default_value = "list")]
        format: ops::OpsFormat,
        /// Where and who.
        #[command(flatten)]
        remote: Remote,
    },
    /// Show what a `.pte` program really contains: methods, delegate calls per backend, the
    /// kernel calls left on portable kernels and tensors kept in a `.ptd`; or the named
    /// tensors of a `.ptd` data file.
    Inspect {
        /// The `.pte` (or `.ptd`) file.
        file: PathBuf,
    },
    /// Score every variant this machine can run on the `[evaluation]` set of a VARIANTS.toml,
    /// through the real ExecuTorch runtime (exit 8 when one fails its bound).
    Evaluate {
        /// The VARIANTS.toml with an `[evaluation]` section.
        variants: PathBuf,
    },
}
/// Parses the process arguments, runs the command and maps errors to a one-line message.
pub fn main() -> ExitCode {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let matches = examples::with_examples(Cli::command()).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if !matches!(cli.command, Command::Serve { .. }) {
        quiet_on_closed_pipe();
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let mut msg = format!("ferry: {e}");
            for cause in e.chain().skip(1) {
                msg.push_str(&format!(": {cause}"));
            }
            eprintln!("{msg}");
            ExitCode::from(exit::of(&e))
        }
    }
}

/// A command whose output goes into a pipe that closes early (`ferry releases | head -1`) ends
/// quietly, as other command-line tools do, instead of panicking on the failed write: the
/// default action of SIGPIPE is restored (Rust ignores it). Not for `serve`, whose sockets
/// report closed peers as errors.
#[cfg(unix)]
#[allow(unsafe_code)]
fn quiet_on_closed_pipe() {
    // SAFETY: restoring a signal's default disposition before any thread writes is sound.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn quiet_on_closed_pipe() {}

/// Runs one parsed command.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    match cli.command {
        Command::Serve {
            config,
            listen,
            data,
            demo,
            mirror_of,
            trust,
        } => {
            let flags = Flags {
                config,
                listen,
                data,
            };
            match mirror_of.zip(trust) {
                Some((origin, trust)) => serve::serve_mirror(flags, origin, trust, json),
                None => serve(flags, demo, json),
            }
        }
        Command::Keys { command } => match command {
            KeysCommand::Generate {
                out,
                encrypt,
                root_key,
                release_key,
            } => keys_generate(
                &out,
                encrypt,
                [root_key.as_deref(), release_key.as_deref()],
                json,
            ),
            KeysCommand::Encrypt { file } => keys_encrypt(&file, json),
            KeysCommand::Rotate {
                role,
                keys,
                expires_in_days,
                new_key,
                root_key,
                fleet_reads_p256,
            } => keys_rotate(
                role,
                &keys,
                expires_in_days,
                [new_key.as_deref(), root_key.as_deref()],
                fleet_reads_p256,
                json,
            ),
            KeysCommand::Token { name, scopes } => keys_token(&name, &scopes, json),
            KeysCommand::Push { keys, remote } => keys::keys_push(&keys, &remote, json),
        },
        Command::Sign {
            variants,
            key,
            output,
            allow_regression,
            keys,
            sealed_out,
        } => sign_cmd(
            &variants,
            &key,
            &output,
            allow_regression.as_deref(),
            sign::SealPaths {
                keys: keys.as_deref(),
                out: sealed_out.as_deref(),
            },
            json,
        ),
        Command::Publish {
            release,
            files,
            remote,
            quiet,
            no_compress,
        } => {
            let (server, token, ca) = remote.resolve()?;
            let flags = publish::PublishFlags {
                quiet,
                json,
                compress: !no_compress,
            };
            publish_cmd(&release, &files, &server, &token, ca.as_deref(), flags)
        }
        Command::Inspect { file } => inspect(&file, json),
        Command::Evaluate { variants } => evaluate::evaluate_cmd(&variants, json),
        Command::Rollout { command } => rollout_cmd(command, json),
        Command::Experiment { command } => experiment::experiment_cmd(command, json),
        Command::Health {
            model,
            since,
            remote,
        } => health_cmd(&model, since.as_deref(), json, &remote),
        Command::Deny { command } => deny::deny_cmd(command, json),
        Command::Mirror { command } => mirror::mirror_cmd(command, json),
        Command::Fleet { command } => fleet::fleet_cmd(command, json),
        Command::Release { command } => release::release_cmd(command, json),
        Command::Releases { model, remote } => releases::releases_cmd(&model, json, &remote),
        Command::Ops {
            model,
            release,
            app_version,
            variant,
            skip_unknown,
            format,
            remote,
        } => ops::ops_cmd(
            &ops::OpsQuery {
                model: &model,
                release: release.as_deref(),
                app_version: app_version.as_deref(),
                variant: variant.as_deref(),
                skip_unknown,
            },
            format,
            json,
            &remote,
        ),
        Command::Models { remote } => models::models_cmd(json, &remote),
        Command::Resolve {
            model,
            device,
            remote,
        } => resolve::resolve_cmd(&model, &device, json, &remote),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            use std::io::Write as _;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "ferry", &mut script);
            // A closed pipe (`| head`) is not an error worth a message.
            match std::io::stdout().write_all(&script) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
                Err(e) => Err(e.into()),
            }
        }
    }
}
