//! A release's model metadata in VARIANTS.toml: the input preprocessing, the labels file and
//! other assets the app reads, release-wide or per variant, checked and turned into the signed
//! manifest's `preprocess`, `labels` and `assets`.
//!
//! ```toml
//! labels = "labels.txt"            # release-wide: one label per line, in output order
//! assets = ["tokenizer.json"]      # release-wide files the app reads
//!
//! [preprocess]                     # release-wide; a variant's own replaces it whole
//! resize = { width = 224, height = 224, filter = "bilinear" }
//! color = "rgb"                    # rgb | bgr | gray
//! layout = "nchw"                  # nchw | nhwc
//! range = [0.0, 1.0]               # where 8-bit 0 and 255 land
//! mean = [0.485, 0.456, 0.406]
//! std = [0.229, 0.224, 0.225]
//!
//! [[variant]]
//! # ...
//! assets = ["vocab.txt"]           # added to the release-wide ones
//! labels = "labels-int8.txt"       # replaces the release-wide one
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use ferry_shared::manifest::{ExtraFile, MAX_LABELS_BYTES, Preprocess};
use ferry_shared::{Sha256Digest, pte};

use super::sign::{SignedFile, VariantSpec, VariantsFile};

/// A variant's metadata, ready for its manifest entry, and what `ferry sign` warns about.
#[derive(Debug, Default)]
pub struct VariantMetadata {
    /// Its assets, release-wide ones first.
    pub assets: Vec<ExtraFile>,
    /// The same files, for `ferry publish`.
    pub signed: Vec<SignedFile>,
    /// Its preprocessing.
    pub preprocess: Option<Preprocess>,
    /// The asset holding its labels.
    pub labels: Option<String>,
    /// Things that are likely wrong but not refused.
    pub warnings: Vec<String>,
}

/// Parses a `[preprocess]` table, refusing a key or value this build does not know (a typo
/// in VARIANTS.toml must not sign a release whose app reads something else).
pub fn parse_preprocess(ctx: &str, table: &toml::Value) -> anyhow::Result<Preprocess> {
    let p: Preprocess = table
        .clone()
        .try_into()
        .with_context(|| format!("{ctx}: [preprocess] is not valid"))?;
    let json = serde_json::to_vec(table).context("preprocess table")?;
    if let Some(field) = ferry_shared::protocol::unknown_field_path(&json, &p) {
        bail!(
            "{ctx}: [preprocess] has an unknown key {field:?} (known: resize {{width, height, \
             filter}}, color, layout, range, mean, std)"
        );
    }
    if let Some(field) = p.unknown_values().first() {
        bail!(
            "{ctx}: [preprocess] {field} has a value ferry does not know (resize.filter: \
             nearest|bilinear|bicubic|area|lanczos; color: rgb|bgr|gray; layout: nchw|nhwc)"
        );
    }
    p.check().map_err(|e| anyhow::anyhow!("{ctx}: {e}"))?;
    Ok(p)
}

/// Builds a variant's metadata from the release-wide and its own settings: reads each asset
/// (relative to `base`), checks the labels file (UTF-8 text, one label per line, at most
/// [`MAX_LABELS_BYTES`]) and the preprocessing against the program's first input.
pub fn variant_metadata(
    spec: &VariantsFile,
    v: &VariantSpec,
    base: &Path,
    read: &dyn Fn(&Path) -> anyhow::Result<Vec<u8>>,
    signature: Option<&pte::Signature>,
) -> anyhow::Result<VariantMetadata> {
    let ctx = format!("variant {}", v.id);
    let mut out = VariantMetadata::default();
    let labels = v.labels.as_ref().or(spec.labels.as_ref());
    let mut paths: Vec<&PathBuf> = spec.assets.iter().chain(&v.assets).collect();
    if let Some(l) = labels
        && !paths.contains(&l)
    {
        paths.push(l);
    }
    for rel in paths {
        let path = base.join(rel);
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{ctx}: asset {} has no usable file name", path.display()))?
            .to_string();
        if out.assets.iter().any(|a| a.name == name) {
            bail!("{ctx}: two assets are named {name}; each asset of a variant needs its own name");
        }
        let bytes =
            read(&path).with_context(|| format!("{ctx}: cannot read asset {}", path.display()))?;
        if bytes.is_empty() {
            bail!("{ctx}: asset {} is empty", path.display());
        }
        if Some(rel) == labels {
            let count = check_labels(&ctx, &path, &bytes)?;
            if let Some(classes) = signature.and_then(classes_of)
                && classes != count as u64
            {
                out.warnings.push(format!(
                    "{ctx}: {} has {count} labels, and the program's first output has \
                     {classes} values in its last dimension",
                    path.display()
                ));
            }
            out.labels = Some(name.clone());
        }
        let sha256 = Sha256Digest::of(&bytes);
        let size = bytes.len() as u64;
        out.assets.push(ExtraFile { name, sha256, size });
        out.signed.push(SignedFile {
            path,
            sha256,
            size,
            data: Vec::new(),
            assets: Vec::new(),
        });
    }
    let table = v.preprocess.as_ref().or(spec.preprocess.as_ref());
    if let Some(t) = table {
        let p = parse_preprocess(&ctx, t)?;
        if let Some(sig) = signature {
            out.warnings.extend(preprocess_warnings(&ctx, &p, sig));
        }
        out.preprocess = Some(p);
    }
    Ok(out)
}

/// The number of labels in a labels file; refuses one that is not UTF-8 text, too large, or
/// has an empty label.
fn check_labels(ctx: &str, path: &Path, bytes: &[u8]) -> anyhow::Result<usize> {
    if bytes.len() as u64 > MAX_LABELS_BYTES {
        bail!(
            "{ctx}: labels file {} is {} bytes; at most {MAX_LABELS_BYTES}",
            path.display(),
            bytes.len()
        );
    }
    let text = std::str::from_utf8(bytes)
        .with_context(|| format!("{ctx}: labels file {} is not UTF-8 text", path.display()))?;
    let labels: Vec<&str> = text.lines().collect();
    if let Some(i) = labels.iter().position(|l| l.trim().is_empty()) {
        bail!(
            "{ctx}: labels file {} has an empty label on line {} (one label per line, in \
             output order)",
            path.display(),
            i + 1
        );
    }
    Ok(labels.len())
}

/// The last dimension of `forward`'s first output, where a classifier keeps its classes.
fn classes_of(sig: &pte::Signature) -> Option<u64> {
    let out = sig.outputs.first()?;
    u64::try_from(*out.shape.last()?).ok()
}

/// What in `p` contradicts the program's first input: a channel count or a size that a 4-d
/// input in the declared layout does not have.
fn preprocess_warnings(ctx: &str, p: &Preprocess, sig: &pte::Signature) -> Vec<String> {
    use ferry_shared::manifest::Layout;
    let mut out = Vec::new();
    let Some(input) = sig.inputs.first().filter(|t| t.shape.len() == 4) else {
        return out;
    };
    let s = &input.shape;
    let (c, h, w) = match p.layout {
        Some(Layout::Nchw) => (s[1], s[2], s[3]),
        Some(Layout::Nhwc) => (s[3], s[1], s[2]),
        _ => return out,
    };
    if let Some(n) = p.color.and_then(|c| c.channels())
        && i64::try_from(n).ok() != Some(c)
    {
        out.push(format!(
            "{ctx}: preprocess color has {n} channel(s), and the program's input 0 ({}) has {c}",
            input.describe()
        ));
    }
    if let Some(r) = &p.resize
        && (i64::from(r.width) != w || i64::from(r.height) != h)
    {
        out.push(format!(
            "{ctx}: preprocess resizes to {}x{}, and the program's input 0 ({}) is {w}x{h}",
            r.width,
            r.height,
            input.describe()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML_HEAD: &str = "model = \"m\"\nversion = \"1.0.0\"\n";
    const VARIANT: &str = "[[variant]]\nid = \"v\"\nfile = \"m.pte\"\ndelegate = \"xnnpack\"\n\
                           quant = \"fp32\"\nruntime = \"*\"\napp = \"*\"\n";

    fn spec(release: &str, variant: &str) -> VariantsFile {
        toml::from_str(&format!("{TOML_HEAD}{release}\n{VARIANT}{variant}")).expect("toml")
    }

    /// A 1x3x224x224 image input and a 1x3 output.
    fn signature() -> pte::Signature {
        let t = |shape: Vec<i64>| pte::TensorSpec {
            dtype: "float32".into(),
            dim_order: (0..shape.len() as u8).collect(),
            shape,
            dynamism: pte::Dynamism::Static,
        };
        pte::Signature {
            inputs: vec![t(vec![1, 3, 224, 224])],
            outputs: vec![t(vec![1, 3])],
        }
    }

    fn run(s: &VariantsFile, files: &[(&str, &[u8])]) -> anyhow::Result<VariantMetadata> {
        let files: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|(n, b)| (n.to_string(), b.to_vec()))
            .collect();
        let read = move |p: &Path| -> anyhow::Result<Vec<u8>> {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            files
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, b)| b.clone())
                .ok_or_else(|| anyhow::anyhow!("no such file"))
        };
        variant_metadata(
            s,
            &s.variants[0],
            Path::new("/r"),
            &read,
            Some(&signature()),
        )
    }

    fn err(r: anyhow::Result<VariantMetadata>) -> String {
        format!("{:#}", r.expect_err("refused"))
    }

    #[test]
    fn release_wide_settings_apply_and_a_variants_own_replace_them() {
        let s = spec(
            "labels = \"l.txt\"\nassets = [\"tok.json\"]\n[preprocess]\ncolor = \"rgb\"\n\
             layout = \"nchw\"\nresize = { width = 224, height = 224, filter = \"bilinear\" }",
            "assets = [\"cfg.json\"]\n[variant.preprocess]\ncolor = \"bgr\"\nlayout = \"nchw\"",
        );
        let m = run(
            &s,
            &[
                ("l.txt", b"cat\ndog\nbird\n"),
                ("tok.json", b"{}"),
                ("cfg.json", b"[]"),
            ],
        )
        .expect("metadata");
        let names: Vec<&str> = m.assets.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["tok.json", "cfg.json", "l.txt"]);
        assert_eq!(m.labels.as_deref(), Some("l.txt"));
        let p = m.preprocess.expect("preprocess");
        assert_eq!(p.color, Some(ferry_shared::manifest::ColorOrder::Bgr));
        assert_eq!(
            p.resize, None,
            "the variant's table replaces the release's whole"
        );
        assert_eq!(m.warnings, Vec::<String>::new());
    }

    #[test]
    fn typos_unknown_values_and_bad_labels_are_refused() {
        let e = err(run(&spec("[preprocess]\nmeen = [0.5]", ""), &[]));
        assert!(e.contains("unknown key \"meen\""), "{e}");
        let e = err(run(
            &spec(
                "[preprocess]\nresize = { width = 8, height = 8, filtr = \"area\" }",
                "",
            ),
            &[],
        ));
        assert!(e.contains("resize.filtr"), "{e}");
        let e = err(run(&spec("[preprocess]\ncolor = \"rbg\"", ""), &[]));
        assert!(e.contains("color has a value ferry does not know"), "{e}");
        let e = err(run(&spec("[preprocess]\nstd = [0.0]", ""), &[]));
        assert!(e.contains("above 0"), "{e}");
        let e = err(run(
            &spec("labels = \"l.txt\"", ""),
            &[("l.txt", b"cat\n\ndog\n")],
        ));
        assert!(e.contains("empty label on line 2"), "{e}");
        let e = err(run(
            &spec("labels = \"l.txt\"", ""),
            &[("l.txt", b"\xff\xfe")],
        ));
        assert!(e.contains("not UTF-8"), "{e}");
        let e = err(run(&spec("labels = \"l.txt\"", ""), &[]));
        assert!(e.contains("cannot read asset"), "{e}");
        let e = err(run(
            &spec("assets = [\"a/x.json\"]", "assets = [\"b/x.json\"]"),
            &[("x.json", b"{}")],
        ));
        assert!(e.contains("two assets are named x.json"), "{e}");
        let e = err(run(&spec("assets = [\"x.json\"]", ""), &[("x.json", b"")]));
        assert!(e.contains("is empty"), "{e}");
    }

    #[test]
    fn metadata_that_contradicts_the_program_is_warned_about() {
        let s = spec(
            "labels = \"l.txt\"\n[preprocess]\ncolor = \"gray\"\nlayout = \"nchw\"\n\
             resize = { width = 128, height = 96 }",
            "",
        );
        let m = run(&s, &[("l.txt", b"a\nb\n")]).expect("metadata");
        let w = m.warnings.join("\n");
        assert!(w.contains("2 labels"), "{w}");
        assert!(w.contains("color has 1 channel(s)"), "{w}");
        assert!(w.contains("resizes to 128x96"), "{w}");
    }
}
