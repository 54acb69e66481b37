//! Operators: the kernels (`namespace::name.overload`, as ExecuTorch's registry names them)
//! a program calls outside its delegates, and the set a device's runtime registered. A
//! variant needing one the runtime lacks fails `load_method` with `OperatorMissing` after its
//! whole download; the signed manifest names what each variant needs, and the device says
//! what it has (by digest, and once the list), so neither is tried.

use std::collections::BTreeSet;

use crate::Sha256Digest;

/// Most operators one variant may need, or one device may list.
pub const MAX_OPERATORS: usize = 4096;

/// Longest operator name, in bytes.
pub const MAX_OPERATOR_NAME: usize = 128;

/// Checks one operator name: 1 to [`MAX_OPERATOR_NAME`] bytes of `[A-Za-z0-9_:.]`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_OPERATOR_NAME {
        return Err(format!(
            "operator name {:?} must be 1 to {MAX_OPERATOR_NAME} bytes",
            truncated(name)
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.'))
    {
        return Err(format!(
            "operator name {:?} may hold only letters, digits, '_', ':' and '.'",
            truncated(name)
        ));
    }
    Ok(())
}

/// Checks a list of operator names: each valid, at most [`MAX_OPERATORS`], sorted and without
/// duplicates (the one form that is signed and digested).
pub fn check_list(names: &[String]) -> Result<(), String> {
    if names.len() > MAX_OPERATORS {
        return Err(format!(
            "{} operators; at most {MAX_OPERATORS} are allowed",
            names.len()
        ));
    }
    for n in names {
        check_name(n)?;
    }
    if names.windows(2).any(|w| w[0] >= w[1]) {
        return Err("operators must be sorted and listed once each".into());
    }
    Ok(())
}

/// The sorted, deduplicated form of `names`.
pub fn normalize<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Vec<String> {
    names
        .into_iter()
        .map(Into::into)
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect()
}

/// The digest a device sends for its operator set: SHA-256 of the sorted, deduplicated names
/// joined by `\n` (no trailing newline).
pub fn digest(names: &[String]) -> Sha256Digest {
    let normal = normalize(names.iter().map(String::as_str));
    Sha256Digest::of(normal.join("\n").as_bytes())
}

/// The operators of `required` that `available` lacks, in order.
pub fn missing<'a>(required: &'a [String], available: &BTreeSet<String>) -> Vec<&'a str> {
    required
        .iter()
        .filter(|op| !available.contains(op.as_str()))
        .map(String::as_str)
        .collect()
}

/// A name cut to 40 characters, for error messages about hostile input.
fn truncated(s: &str) -> String {
    s.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_of_the_sorted_deduplicated_list() {
        let a = digest(&["b::y.out".into(), "a::x.out".into(), "b::y.out".into()]);
        assert_eq!(a, Sha256Digest::of(b"a::x.out\nb::y.out"));
        assert_eq!(a, digest(&["a::x.out".into(), "b::y.out".into()]));
        assert_ne!(a, digest(&["a::x.out".into()]));
    }

    #[test]
    fn names_and_lists_are_bounded_and_canonical() {
        assert!(check_name("aten::add.out").is_ok());
        assert!(check_name("llama::custom_sdpa.out").is_ok());
        for bad in ["", "aten::add out", "aten::add\n", "ä", &"a".repeat(129)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_list(&["a::x.out".into(), "b::y.out".into()]).is_ok());
        assert!(check_list(&["b::y.out".into(), "a::x.out".into()]).is_err());
        assert!(check_list(&["a::x.out".into(), "a::x.out".into()]).is_err());
        let many: Vec<String> = (0..=MAX_OPERATORS)
            .map(|i| format!("a::x{i:05}.out"))
            .collect();
        assert!(check_list(&many).is_err());
    }

    #[test]
    fn missing_names_what_the_runtime_lacks() {
        let have: BTreeSet<String> = ["aten::add.out".to_string()].into();
        let need = vec![
            "aten::add.out".to_string(),
            "llama::custom_sdpa.out".to_string(),
        ];
        assert_eq!(missing(&need, &have), ["llama::custom_sdpa.out"]);
    }
}
