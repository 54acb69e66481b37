//! Examples shown at the end of every command's `--help`, kept in one table so that a test
//! can check that no command is without them.

/// (command path, examples), one example per line.
pub(crate) const EXAMPLES: &[(&str, &str)] = &[
    (
        "",
        "ferry serve --demo\n\
         ferry sign models/VARIANTS.toml --key ferry-data/keys/release.key -o release.json\n\
         ferry publish release.json --files models\n\
         ferry rollout start demo-mlp --release 1.1.0 --percent 5",
    ),
    (
        "serve",
        "ferry serve --demo\n\
         ferry serve --config /etc/ferry/ferry.toml\n\
         FERRY_STORAGE=s3 FERRY_S3_BUCKET=models ferry serve --listen 0.0.0.0:8080\n\
         ferry serve --mirror-of https://models.example.com --trust trust.json --listen 0.0.0.0:8080",
    ),
    (
        "keys",
        "ferry keys generate --out keys\nferry keys rotate online --keys keys",
    ),
    (
        "keys generate",
        "ferry keys generate --out keys\nferry keys generate --out keys --encrypt",
    ),
    (
        "keys encrypt",
        "FERRY_KEY_PASSPHRASE=... ferry keys encrypt keys/release.key",
    ),
    (
        "keys rotate",
        "ferry keys rotate online --keys keys --expires-in-days 365\nferry keys rotate release --keys keys\n\
         ferry keys rotate key-release --keys keys",
    ),
    (
        "keys push",
        "ferry keys rotate release --keys keys\nferry keys push --keys keys --server https://ferry.example.com",
    ),
    (
        "keys token",
        "ferry keys token --name ci --scopes publish\nferry keys token --name oncall --scopes rollout,read",
    ),
    (
        "sign",
        "ferry sign models/VARIANTS.toml --key ferry-data/keys/release.key -o release.json\n\
         SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) ferry sign VARIANTS.toml --key /offline/release.key -o release.json\n\
         ferry sign VARIANTS.toml --key keys/release.key --sealed-out sealed -o release.json",
    ),
    (
        "publish",
        "ferry publish release.json --files models\n\
         FERRY_SERVER=https://ferry.example.com ferry publish release.json --files models --quiet\n\
         ferry publish release.json --files sealed --files models",
    ),
    (
        "rollout",
        "ferry rollout start demo-mlp --release 1.1.0 --percent 5\nferry rollout status demo-mlp",
    ),
    (
        "rollout start",
        "ferry rollout start demo-mlp --release 1.1.0 --percent 5 --dry-run\n\
         ferry rollout start demo-mlp --release 1.1.0 --percent 5 --max-failure-rate 0.02\n\
         ferry rollout start demo-mlp --release 1.1.0 --steps 1,5,25,100 --every 6h",
    ),
    (
        "rollout set",
        "ferry rollout set demo-mlp --percent 20 --dry-run\nferry rollout set demo-mlp --percent 20 --reason 'healthy for a day'",
    ),
    (
        "rollout pause",
        "ferry rollout pause demo-mlp --reason 'looking into crashes'",
    ),
    (
        "rollout resume",
        "ferry rollout resume demo-mlp --reason 'fixed on the server side'",
    ),
    (
        "rollout rollback",
        "ferry rollout rollback demo-mlp --reason 'bad outputs on SM8450'",
    ),
    ("rollout complete", "ferry rollout complete demo-mlp"),
    (
        "rollout pin",
        "ferry rollout pin demo-mlp --install-id qa-pixel-8 --release 1.1.0 --expires 7d",
    ),
    (
        "rollout unpin",
        "ferry rollout unpin demo-mlp --install-id qa-pixel-8",
    ),
    (
        "rollout revert",
        "ferry rollout revert demo-mlp --to 1.0.0 --reason '1.1.0 drains batteries' --dry-run",
    ),
    (
        "rollout status",
        "ferry rollout status demo-mlp\nferry rollout status demo-mlp --json",
    ),
    (
        "experiment",
        "ferry experiment start demo-mlp --control 1.0.0 --treatment 1.1.0 --share 20\nferry experiment status demo-mlp",
    ),
    (
        "experiment start",
        "ferry experiment start demo-mlp --control 1.0.0 --treatment 1.1.0 --share 20 --reason 'fine-tune'\n\
         ferry experiment start demo-mlp --control 1.1.0/xnnpack-fp32 --treatment 1.1.0/xnnpack-int8 --classes soc\n\
         ferry experiment start demo-mlp --control 1.0.0 --treatment 1.1.0 --metric accepted --metric time_to_answer_ms:lower",
    ),
    (
        "experiment status",
        "ferry experiment status demo-mlp\nferry experiment status demo-mlp --json",
    ),
    (
        "experiment stop",
        "ferry experiment stop demo-mlp --reason 'no difference after 2 weeks'\n\
         ferry experiment stop demo-mlp --winner treatment --roll-out --reason 'int8 is as good and faster'",
    ),
    (
        "experiment history",
        "ferry experiment history demo-mlp\nferry experiment history demo-mlp --json",
    ),
    (
        "health",
        "ferry health demo-mlp\nferry health demo-mlp --since 1h\nferry health demo-mlp --since step --json",
    ),
    ("fleet", "ferry fleet clients demo-mlp --since 7d"),
    (
        "fleet clients",
        "ferry fleet clients demo-mlp\nferry fleet clients demo-mlp --since 7d --json",
    ),
    ("deny", "ferry deny list demo-mlp"),
    (
        "mirror",
        "ferry mirror sync demo-mlp --server http://mirror.site:8080",
    ),
    (
        "mirror sync",
        "ferry mirror sync demo-mlp --server http://mirror.site:8080\n\
         ferry mirror sync demo-mlp --release 1.1.0 --server http://mirror.site:8080 --json",
    ),
    (
        "deny list",
        "ferry deny list demo-mlp\nferry deny list demo-mlp --json",
    ),
    (
        "deny add",
        "ferry deny add demo-mlp --release 1.1.0 --variant vulkan-fp32 --soc SM8450",
    ),
    (
        "deny override",
        "ferry deny override demo-mlp --release 1.1.0 --variant vulkan-fp32 --soc SM8450",
    ),
    (
        "deny clear",
        "ferry deny clear demo-mlp --release 1.1.0 --variant vulkan-fp32 --device-model 'Pixel 6'",
    ),
    (
        "release",
        "ferry release revoke demo-mlp 1.1.0 --key keys/release.key --reason 'wrong weights'",
    ),
    (
        "release revoke",
        "ferry release revoke demo-mlp 1.1.0 --key keys/release.key --reason 'wrong weights'",
    ),
    (
        "release seal-stop",
        "ferry release seal-stop demo-mlp 1.1.0 --reason 'keys leaked from a test device'\n\
         ferry release seal-stop demo-mlp 1.1.0 --resume",
    ),
    (
        "release key-releases",
        "ferry release key-releases demo-mlp 1.1.0\nferry release key-releases demo-mlp 1.1.0 --json",
    ),
    ("models", "ferry models\nferry models --json"),
    (
        "resolve",
        "ferry resolve demo-mlp --platform android --backends XnnpackBackend,VulkanBackend --runtime 1.5.1 --app 1.0.0 --ram-mb 8192\n\
         ferry resolve demo-mlp --profile pixel8.json --install-id qa-1 --json",
    ),
    (
        "completions",
        "ferry completions bash > ~/.local/share/bash-completion/completions/ferry\n\
         ferry completions zsh > ~/.zfunc/_ferry\n\
         ferry completions fish > ~/.config/fish/completions/ferry.fish",
    ),
    (
        "releases",
        "ferry releases demo-mlp\nferry releases demo-mlp --json",
    ),
    (
        "inspect",
        "ferry inspect model.pte\nferry inspect model.pte --json",
    ),
    (
        "evaluate",
        "ferry evaluate VARIANTS.toml\nferry evaluate VARIANTS.toml --json > evaluation.json",
    ),
    (
        "ops",
        "ferry ops demo-mlp --release 1.0.0\nferry ops demo-mlp --app-version 2.3.0 --format yaml > selected_ops.yaml",
    ),
];

/// `cmd` with each command's examples appended to its help (after what it already says there).
pub(crate) fn with_examples(cmd: clap::Command) -> clap::Command {
    fn walk(mut cmd: clap::Command, path: &str) -> clap::Command {
        if let Some((_, ex)) = EXAMPLES.iter().find(|(p, _)| *p == path) {
            let lines: String = ex.lines().map(|l| format!("\n  {}", l.trim())).collect();
            let extra = match cmd.get_after_help() {
                Some(h) => format!("{h}\n\nExamples:{lines}"),
                None => format!("Examples:{lines}"),
            };
            cmd = cmd.after_help(extra);
        }
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        for name in names {
            let sub_path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path} {name}")
            };
            cmd = cmd.mut_subcommand(&name, |s| walk(s, &sub_path));
        }
        cmd
    }
    walk(cmd, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory as _, Parser as _};

    #[test]
    fn every_command_has_examples_that_parse() {
        let cmd = with_examples(crate::cli::Cli::command());
        fn leaves(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
            for s in cmd.get_subcommands() {
                if s.get_name() == "help" {
                    continue;
                }
                let p = if path.is_empty() {
                    s.get_name().to_string()
                } else {
                    format!("{path} {}", s.get_name())
                };
                out.push(p.clone());
                leaves(s, &p, out);
            }
        }
        let mut all = vec![String::new()];
        leaves(&cmd, "", &mut all);
        for p in &all {
            assert!(
                EXAMPLES.iter().any(|(q, _)| q == p),
                "`ferry {p} --help` has no examples"
            );
        }
        for (p, ex) in EXAMPLES {
            assert!(
                all.iter().any(|q| q == p),
                "examples for a command that does not exist: {p}"
            );
            // Every example is a valid command line (environment assignments and shell
            // redirections aside).
            for line in ex.lines() {
                let words = shell_words(line);
                let start = words
                    .iter()
                    .position(|w| w == "ferry")
                    .expect("a ferry command");
                let words: Vec<&String> = words[start..].iter().take_while(|w| *w != ">").collect();
                crate::cli::Cli::try_parse_from(words)
                    .unwrap_or_else(|e| panic!("example `{line}` does not parse: {e}"));
            }
        }
    }

    /// Splits a command line on spaces, keeping 'single-quoted' words whole.
    fn shell_words(line: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut word = String::new();
        let mut quoted = false;
        for c in line.trim().chars() {
            match c {
                '\'' => quoted = !quoted,
                ' ' if !quoted => {
                    if !word.is_empty() {
                        out.push(std::mem::take(&mut word));
                    }
                }
                c => word.push(c),
            }
        }
        if !word.is_empty() {
            out.push(word);
        }
        out
    }
}
