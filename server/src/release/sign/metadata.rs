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
use ferry_shared::manifest::{ExtraFile, MAX_LABELS, MAX_LABELS_BYTES, Preprocess};
use ferry_shared::{Sha256Digest, pte};

use crate::release::sign::variants::{SignedFile, VariantSpec, VariantsFile};

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
/// in VARIANTS.toml must not sign a release whose app reads something else). `ctx` names the
/// table in messages. `mean` and `std` may be given as one bare number.
pub fn parse_preprocess(ctx: &str, table: &toml::Value) -> anyhow::Result<Preprocess> {
    let mut table = table.clone();
    let Some(t) = table.as_table_mut() else {
        bail!("{ctx} must be a table (resize, color, layout, range, mean, std)");
    };
    if t.is_empty() {
        bail!(
            "{ctx} is empty: give at least one of resize, color, layout, range, mean, std, or \
             leave it out"
        );
    }
    for k in ["mean", "std"] {
        if let Some(v) = t.get_mut(k)
            && (v.is_float() || v.is_integer())
        {
            *v = toml::Value::Array(vec![v.clone()]);
        }
    }
    let json = serde_json::to_vec(&table).context("preprocess table")?;
    let p: Preprocess = table
        .clone()
        .try_into()
        .map_err(|e| anyhow::anyhow!("{ctx} is not valid: {}", one_line(&e.to_string())))?;
    if let Some(field) = ferry_shared::wire::protocol::unknown_field_path(&json, &p) {
        bail!(
            "{ctx} has an unknown key {field:?} (known: resize = {{ width, height, filter }}, \
             color, layout, range, mean, std)"
        );
    }
    if let Some(field) = p.unknown_values().first() {
        let typed = field
            .split('.')
            .try_fold(&table, |v, k| v.get(k))
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let known = match *field {
            "resize.filter" => "nearest, bilinear, bicubic, area or lanczos",
            "color" => "rgb, bgr or gray",
            _ => "nchw or nhwc",
        };
        let case = if typed != typed.to_lowercase() {
            " (values are lowercase)"
        } else {
            ""
        };
        bail!("{ctx} {field} = {typed:?} is not one ferry knows: use {known}{case}");
    }
    p.check().map_err(|e| anyhow::anyhow!("{ctx}: {e}"))?;
    Ok(p)
}

/// A message on one line (the TOML library breaks its own).
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `a` and `b` name the same file relative to one folder (`./x` and `x`).
fn same_path(a: &Path, b: &Path) -> bool {
    let norm = |p: &Path| -> PathBuf {
        p.components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect()
    };
    norm(a) == norm(b)
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
    let labels_ctx = match &v.labels {
        Some(_) => ctx.clone(),
        None => "the release-wide labels".to_string(),
    };
    let mut paths: Vec<&PathBuf> = Vec::new();
    for p in spec.assets.iter().chain(&v.assets).chain(labels) {
        if !paths.iter().any(|q| same_path(q, p)) {
            paths.push(p);
        }
    }
    let mut seen: Vec<(String, &PathBuf)> = Vec::new();
    for rel in paths {
        let path = base.join(rel);
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{ctx}: asset {} has no usable file name", path.display()))?
            .to_string();
        if let Some((_, other)) = seen.iter().find(|(n, _)| *n == name) {
            bail!(
                "{ctx}: two assets are named {name} ({} and {}); each asset of a variant needs \
                 its own file name",
                other.display(),
                rel.display()
            );
        }
        seen.push((name.clone(), rel));
        let is_labels = labels.is_some_and(|l| same_path(l, rel));
        // The labels file is read whole (it is checked line by line, and bounded); any other
        // asset only for its digest and size, streamed when large (a tokenizer, weights).
        let file = if is_labels {
            let bytes = read(&path)
                .with_context(|| format!("{ctx}: cannot read asset {}", path.display()))?;
            crate::release::sign::files::Described {
                size: bytes.len() as u64,
                sha256: Sha256Digest::of(&bytes),
                bytes,
            }
        } else {
            crate::release::sign::files::describe(&path, read, &|_| None)
                .with_context(|| format!("{ctx}: cannot read asset {}", path.display()))?
        };
        if file.size == 0 {
            bail!("{ctx}: asset {} is empty", path.display());
        }
        if is_labels {
            let count = check_labels(&labels_ctx, &path, &file.bytes)?;
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
        let (sha256, size) = (file.sha256, file.size);
        out.assets.push(ExtraFile {
            name,
            sha256,
            size,
            chunk_index: None,
        });
        out.signed.push(SignedFile {
            path,
            sha256,
            size,
            data: Vec::new(),
            assets: Vec::new(),
        });
    }
    let table = match (&v.preprocess, &spec.preprocess) {
        (Some(t), _) => Some((t, format!("{ctx}: [variant.preprocess]"))),
        (None, Some(t)) => Some((t, "the release-wide [preprocess]".to_string())),
        (None, None) => None,
    };
    if let Some((t, pctx)) = table {
        let p = parse_preprocess(&pctx, t)?;
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
    if text.starts_with('\u{feff}') {
        bail!(
            "{ctx}: labels file {} starts with a byte order mark, which would become part of \
             the first label; save it as UTF-8 without BOM",
            path.display()
        );
    }
    let labels: Vec<&str> = text.lines().collect();
    if let Some(i) = labels.iter().position(|l| l.trim().is_empty()) {
        let trailing = labels[i..].iter().all(|l| l.trim().is_empty());
        bail!(
            "{ctx}: labels file {} has an empty label on line {}{} (one label per line, in \
             output order)",
            path.display(),
            i + 1,
            if trailing {
                "; remove the blank line(s) at the end"
            } else {
                ""
            }
        );
    }
    if labels.len() > MAX_LABELS {
        bail!(
            "{ctx}: labels file {} has {} labels; at most {MAX_LABELS}",
            path.display(),
            labels.len()
        );
    }
    Ok(labels.len())
}

/// The last dimension of `forward`'s first output, where a classifier keeps its classes.
fn classes_of(sig: &pte::Signature) -> Option<u64> {
    let out = sig.outputs.first()?;
    u64::try_from(*out.shape.last()?).ok()
}

/// What in `p` contradicts the program's first input: for a 4-d input in the declared layout,
/// a channel count or size it does not have (saying when the other layout would fit); for a
/// flattened input (`[N]` or `[B, N]`), a resize and colour that do not give `N` values.
fn preprocess_warnings(ctx: &str, p: &Preprocess, sig: &pte::Signature) -> Vec<String> {
    use ferry_shared::manifest::Layout;
    let mut out = Vec::new();
    let Some(input) = sig.inputs.first() else {
        return out;
    };
    let s = &input.shape;
    let channels = p.color.and_then(|c| c.channels()).map(|n| n as i64);
    let size = p
        .resize
        .as_ref()
        .map(|r| (i64::from(r.width), i64::from(r.height)));
    if s.len() <= 2 {
        let per_image = *s.last().unwrap_or(&0);
        if let (Some(c), Some((w, h))) = (channels, size)
            && w * h * c != per_image
        {
            out.push(format!(
                "{ctx}: preprocess gives {w}x{h}x{c} = {} values per image, and the program's \
                 input 0 ({}) takes {per_image}",
                w * h * c,
                input.describe()
            ));
        }
        return out;
    }
    if s.len() != 4 {
        return out;
    }
    // (channels, height, width) as each layout reads the shape.
    let nchw = (s[1], s[2], s[3]);
    let nhwc = (s[3], s[1], s[2]);
    let fits = |(c, h, w): (i64, i64, i64)| {
        channels.is_none_or(|n| n == c) && size.is_none_or(|(rw, rh)| rw == w && rh == h)
    };
    let (declared, other, other_name) = match p.layout {
        Some(Layout::Nchw) => (nchw, nhwc, "nhwc"),
        Some(Layout::Nhwc) => (nhwc, nchw, "nchw"),
        _ => return out,
    };
    if fits(declared) {
        return out;
    }
    let hint = if fits(other) {
        format!(" (with layout = \"{other_name}\" it would)")
    } else {
        String::new()
    };
    let (c, h, w) = declared;
    out.push(format!(
        "{ctx}: preprocess ({}{}) does not fit the program's input 0 ({}), which in its \
         declared layout has {c} channel(s) of {w}x{h}{hint}",
        channels.map_or(String::new(), |n| format!("{n} channel(s)")),
        size.map_or(String::new(), |(w, h)| format!(", resize to {w}x{h}")),
        input.describe()
    ));
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
    fn a_latency_budget_is_read_release_wide_and_per_variant() {
        let s = spec("latency_budget_ms = 25", "latency_budget_ms = 12.5");
        assert_eq!(
            (s.latency_budget_ms, s.variants[0].latency_budget_ms),
            (Some(25.0), Some(12.5))
        );
        let typo = format!("{TOML_HEAD}latency_budget = 25\n{VARIANT}");
        assert!(toml::from_str::<VariantsFile>(&typo).is_err());
    }

    #[test]
    fn typos_unknown_values_and_bad_labels_are_refused() {
        let e = err(run(&spec("[preprocess]\nmeen = [0.5]", ""), &[]));
        assert!(e.contains("unknown key \"meen\""), "{e}");
        assert!(e.starts_with("the release-wide [preprocess]"), "{e}");
        let e = err(run(
            &spec(
                "[preprocess]\nresize = { width = 8, height = 8, filtr = \"area\" }",
                "",
            ),
            &[],
        ));
        assert!(e.contains("resize.filtr"), "{e}");
        let e = err(run(&spec("[preprocess]\ncolor = \"rbg\"", ""), &[]));
        assert!(
            e.contains("color = \"rbg\" is not one ferry knows: use rgb, bgr or gray"),
            "{e}"
        );
        let e = err(run(
            &spec("", "[variant.preprocess]\nlayout = \"NCHW\""),
            &[],
        ));
        assert!(e.contains("variant v: [variant.preprocess] layout"), "{e}");
        assert!(e.contains("(values are lowercase)"), "{e}");
        let e = err(run(&spec("[preprocess]", ""), &[]));
        assert!(e.contains("is empty"), "{e}");
        let e = err(run(
            &spec("labels = \"l.txt\"", ""),
            &[("l.txt", "\u{feff}a\n".as_bytes())],
        ));
        assert!(e.contains("byte order mark"), "{e}");
        let e = err(run(
            &spec("labels = \"l.txt\"", ""),
            &[("l.txt", b"a\nb\n\n")],
        ));
        assert!(e.contains("remove the blank line(s) at the end"), "{e}");
        let e = err(run(&spec("[preprocess]\nstd = [0.0]", ""), &[]));
        assert!(e.contains("at least"), "{e}");
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
        assert!(
            e.contains("two assets are named x.json (a/x.json and b/x.json)"),
            "{e}"
        );
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
        assert!(
            w.contains("does not fit the program's input 0 (float32[1, 3, 224, 224])"),
            "{w}"
        );
        // The other layout fitting is said.
        let s = spec("[preprocess]\ncolor = \"rgb\"\nlayout = \"nhwc\"", "");
        let w = run(&s, &[]).expect("metadata").warnings.join("\n");
        assert!(w.contains("with layout = \"nchw\" it would"), "{w}");
        // A bare number for every channel, and the same labels file named twice, are fine.
        let s = spec(
            "labels = \"l.txt\"\nassets = [\"./l.txt\"]\n[preprocess]\nmean = 0.5\nstd = 2",
            "",
        );
        let m = run(&s, &[("l.txt", b"a\nb\nc\n")]).expect("metadata");
        assert_eq!(m.assets.len(), 1);
        let p = m.preprocess.expect("preprocess");
        assert_eq!((p.mean, p.std), (vec![0.5], vec![2.0]));
    }

    #[test]
    fn a_flattened_input_is_checked_against_resize_and_colour() {
        let s = spec(
            "[preprocess]\ncolor = \"gray\"\nresize = { width = 8, height = 8 }",
            "",
        );
        let read = |_: &Path| -> anyhow::Result<Vec<u8>> { Ok(Vec::new()) };
        let flat = |n: i64| pte::Signature {
            inputs: vec![pte::TensorSpec {
                dtype: "float32".into(),
                shape: vec![8, n],
                dim_order: vec![0, 1],
                dynamism: pte::Dynamism::Static,
            }],
            outputs: Vec::new(),
        };
        let ok = variant_metadata(&s, &s.variants[0], Path::new("/r"), &read, Some(&flat(64)))
            .expect("metadata");
        assert_eq!(ok.warnings, Vec::<String>::new());
        let bad = variant_metadata(&s, &s.variants[0], Path::new("/r"), &read, Some(&flat(192)))
            .expect("metadata");
        assert!(
            bad.warnings
                .join("")
                .contains("8x8x1 = 64 values per image"),
            "{:?}",
            bad.warnings
        );
    }
}
