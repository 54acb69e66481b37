//! `ferry keys generate`, `ferry keys rotate`, `ferry keys push` and `ferry keys token`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;

use crate::keys;

/// `ferry keys ...`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a root key, a release key, an online key, trust.json (what apps pin) and the
    /// first keyring in a folder.
    Generate {
        /// Folder to write into (created; existing keys are never overwritten).
        #[arg(long, value_hint = clap::ValueHint::DirPath)]
        out: PathBuf,
        /// Encrypt root.key and release.key with a passphrase (from FERRY_KEY_PASSPHRASE, or
        /// asked twice on the terminal). online.key stays plain: servers start unattended.
        #[arg(long)]
        encrypt: bool,
        /// Use this root key (pkcs11:… or exec:…; docs/keys.md) instead of making root.key:
        /// its public key goes in trust.json and keyring version 1, which it signs.
        #[arg(long, value_name = "URI")]
        root_key: Option<String>,
        /// Use this release key (pkcs11:… or exec:…) instead of making release.key.
        #[arg(long, value_name = "URI")]
        release_key: Option<String>,
    },
    /// Encrypt a key file in place with a passphrase (from FERRY_KEY_PASSPHRASE, or asked twice
    /// on the terminal); commands that use it then ask for the passphrase.
    Encrypt {
        /// The key file (root.key or release.key).
        file: PathBuf,
    },
    /// Replace the online, release or root key with a new one and write the next keyring
    /// version, signed with the folder's root key.
    Rotate {
        /// Which key to replace.
        role: keys::RotateRole,
        /// The key folder made by `ferry keys generate`.
        #[arg(long, value_hint = clap::ValueHint::DirPath)]
        keys: PathBuf,
        /// Make the new online key expire after this many days (clients refuse what it signs
        /// afterwards, so rotate again before then).
        #[arg(long)]
        expires_in_days: Option<u32>,
        /// The new release or root key, kept where the URI says (pkcs11:… or exec:…; see
        /// docs/keys.md): its public key goes in the next keyring, and no secret is written.
        /// Without it, a new key file is made.
        #[arg(long, value_name = "URI")]
        new_key: Option<String>,
        /// The root key that signs the new keyring (a path, pkcs11:… or exec:…), instead of
        /// the folder's root.key.
        #[arg(long, value_name = "URI")]
        root_key: Option<String>,
        /// Allow the first keyring that lists an ECDSA P-256 key: only once every app build in
        /// the field verifies P-256 (older clients refuse such a keyring; docs/keys.md).
        #[arg(long)]
        fleet_reads_p256: bool,
    },
    /// Send the keyring versions in a key folder that a running server does not hold yet
    /// (after `ferry keys rotate release`): it checks each like devices do, stores it for
    /// every replica with an audit record and trusts the new keys without a restart. (A
    /// keyring that replaces the online key still needs the new online.key and a restart.)
    Push {
        /// The key folder made by `ferry keys generate` (its keyring/ is read; no private key
        /// is sent).
        #[arg(long, value_hint = clap::ValueHint::DirPath)]
        keys: PathBuf,
        /// Where and who (a token with the `publish` scope).
        #[command(flatten)]
        remote: crate::cli::remote::Remote,
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
pub(crate) fn keys_generate(
    out: &Path,
    encrypt: bool,
    external: [Option<&str>; 2],
    json: bool,
) -> anyhow::Result<ExitCode> {
    let p = keys::key_paths(out);
    for path in [&p.root, &p.release, &p.online, &p.trust, &p.keyring] {
        if path.exists() {
            bail!("{} exists; refusing to overwrite keys", path.display());
        }
    }
    let [root_uri, release_uri] = external;
    // The key files this writes (a key kept outside the folder has none).
    let files: Vec<&Path> = [(&p.root, root_uri), (&p.release, release_uri)]
        .into_iter()
        .filter(|(_, uri)| uri.is_none())
        .map(|(path, _)| path.as_path())
        .collect();
    let pass = match (encrypt, files.as_slice()) {
        (false, _) => None,
        (true, []) => {
            return Err(super::exit::Usage(
                "--encrypt: both keys are kept outside the folder; there is no key file to \
                 encrypt"
                    .into(),
            )
            .into());
        }
        (true, [one]) => Some(crate::keys::sealed::passphrase(one, true)?),
        (true, _) => Some(crate::keys::sealed::passphrase(
            &out.join("root.key and release.key"),
            true,
        )?),
    };
    let root = root_uri.map(keys::signer::open_checked).transpose()?;
    let release = release_uri.map(keys::signer::open_checked).transpose()?;
    for (s, role) in [(&root, "root"), (&release, "release")] {
        if s.as_ref().is_some_and(|s| s.role().is_some()) {
            return Err(super::exit::Usage(format!(
                "--{role}-key takes a key kept outside the folder (pkcs11:… or exec:…); \
                 without it, generate makes a {role}.key file"
            ))
            .into());
        }
    }
    let done = keys::generate_keyset_with(
        out,
        pass.as_deref(),
        &keys::External {
            root: root.as_deref(),
            release: release.as_deref(),
        },
    )?;
    let where_kept = |path: &Path, uri: Option<&str>| {
        uri.map_or_else(|| path.display().to_string(), keys::signer::redact)
    };
    if json {
        println!(
            "{}",
            serde_json::json!({"done": done,
                "root_key": where_kept(&p.root, root_uri),
                "release_key": where_kept(&p.release, release_uri),
                "online_key": p.online, "trust": p.trust, "keyring": p.keyring})
        );
        return Ok(ExitCode::SUCCESS);
    }
    for line in done {
        println!("{line}");
    }
    println!();
    match files.as_slice() {
        [] => println!(
            "the root and release keys stay where they are ({} and {})",
            where_kept(&p.root, root_uri),
            where_kept(&p.release, release_uri)
        ),
        [one] => println!(
            "keep {} offline; the other key stays in {}",
            one.display(),
            root_uri
                .or(release_uri)
                .map(keys::signer::redact)
                .unwrap_or_default()
        ),
        _ => println!(
            "keep {} and {} offline (they sign keyrings and releases)",
            p.root.display(),
            p.release.display()
        ),
    }
    println!(
        "copy online.key, trust.json and keyring/ to each server's <data>/keys/; give trust.json \
         to app developers"
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn keys_encrypt(file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let done = keys::encrypt_file(file)?;
    if json {
        println!("{}", serde_json::json!({ "done": [done] }));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{done}");
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn keys_rotate(
    role: keys::RotateRole,
    dir: &Path,
    expires_in_days: Option<u32>,
    uris: [Option<&str>; 2],
    fleet_reads_p256: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let [new_key, root_key] = uris;
    if new_key.is_some() && role == keys::RotateRole::Online {
        return Err(super::exit::Usage(
            "--new-key: the online key signs every decision on every server, unattended; it \
             stays a key file (docs/keys.md, \"The online key\")"
                .into(),
        )
        .into());
    }
    if let Some(d) = expires_in_days
        && !(1..=3650).contains(&d)
    {
        return Err(super::exit::Usage(format!(
            "--expires-in-days {d}: give 1 to 3650 days (an online key that is already expired \
             would stop every server)"
        ))
        .into());
    }
    let expires = expires_in_days.map(|d| time::Duration::days(i64::from(d)));
    let root = root_key.map(keys::signer::open).transpose()?;
    let new = new_key.map(keys::signer::open_checked).transpose()?;
    let done = keys::rotate_with(
        dir,
        role,
        expires,
        &keys::RotateKeys {
            new_key: new.as_deref(),
            root_key: root.as_deref(),
            fleet_reads_p256,
        },
    )?;
    if json {
        println!("{}", serde_json::json!({ "done": done }));
        return Ok(ExitCode::SUCCESS);
    }
    for line in done {
        println!("{line}");
    }
    println!();
    let release_key = new_key.map_or_else(
        || format!("{}/release.key", dir.display()),
        keys::signer::redact,
    );
    let root_where = new_key.map_or_else(
        || format!("keep {}/root.key offline", dir.display()),
        |u| format!("the new root key stays in {}", keys::signer::redact(u)),
    );
    match role {
        keys::RotateRole::Online => println!(
            "next: copy {0}/online.key and {0}/keyring/ to each server's <data>/keys/ and \
             restart it; devices take the new keyring on their next resolve and refuse what \
             the retired key signs",
            dir.display()
        ),
        keys::RotateRole::Release => println!(
            "next: ferry keys push --keys {0} --server URL (every replica trusts the new key \
             within ramp_check_secs, no restart; or copy {0}/keyring/ to each server's \
             <data>/keys/ and restart it); sign new releases with --key {1}. Releases signed by the retired key are refused \
             from now on: sign and publish them again under a new version, then sign each \
             model's revocation list again (ferry release revoke MODEL --resign --key \
             {1})",
            dir.display(),
            release_key
        ),
        keys::RotateRole::KeyRelease => println!(
            "next: copy {0}/key-release.key, {0}/retired/ and {0}/keyring/ to each server's \
             <data>/keys/ and restart it (servers keep unwrapping releases sealed to the \
             retired key), and sign new sealed releases with this key folder",
            dir.display()
        ),
        keys::RotateRole::Root => println!(
            "next: ferry keys push --keys {0} --server URL (no restart), and put the new \
             {0}/trust.json in each server's <data>/keys/ for its next start; apps pinned to the old trust.json follow the rotation, new app \
             builds pin the new one; {1}",
            dir.display(),
            root_where
        ),
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn keys_token(name: &str, scopes: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut parsed = Vec::new();
    for s in scopes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let scope: crate::tokens::Scope =
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
    if json {
        println!(
            "{}",
            serde_json::json!({"name": name, "token": secret,
                "sha256": crate::tokens::hash_token(&secret), "scopes": parsed})
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("token (shown once): {secret}");
    println!();
    println!("[[tokens]]");
    println!("name = {:?}", name);
    println!("sha256 = \"{}\"", crate::tokens::hash_token(&secret));
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

/// `ferry keys push`: sends, oldest first, each keyring version in `dir/keyring/` newer than
/// the one the server holds.
pub(crate) fn keys_push(
    dir: &Path,
    remote: &crate::cli::remote::Remote,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let chain = keys::read_chain(&keys::key_paths(dir).keyring)?;
    if chain.is_empty() {
        bail!(
            "{} holds no keyring: give the folder `ferry keys generate` made",
            keys::key_paths(dir).keyring.display()
        );
    }
    // Every version, oldest first: the server answers 200 for one it holds (the same bytes),
    // 201 for one it takes now, and refuses one that differs from what it holds, so a key
    // folder that is not the one in force is caught, never skipped silently.
    let mut sent = Vec::new();
    let mut last = serde_json::Value::Null;
    for env in &chain {
        let Some(v) = ferry_shared::trust::keyring::Keyring::peek_version(env) else {
            bail!("a keyring in {} has no version", dir.display());
        };
        last = crate::cli::remote::admin_call(
            remote,
            "POST",
            "/v1/admin/keyring",
            Some(serde_json::to_value(env)?),
        )
        .with_context(|| format!("keyring version {v} from {}", dir.display()))?;
        if last["new"] == true {
            sent.push(v);
        }
    }
    let version = last["version"].as_u64().unwrap_or(0);
    if json {
        println!(
            "{}",
            serde_json::json!({"sent": sent, "version": version, "keys": last["keys"]})
        );
        return Ok(ExitCode::SUCCESS);
    }
    if sent.is_empty() {
        println!("the server already holds keyring version {version}; nothing to send");
    } else {
        println!(
            "sent keyring version(s) {}; the server now trusts version {version}:",
            sent.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for k in last["keys"].as_array().into_iter().flatten() {
        println!(
            "  {:<8} {}",
            k["role"].as_str().unwrap_or(""),
            k["keyid"].as_str().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}
