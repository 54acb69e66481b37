//! Why a manifest was refused ([`ManifestError`]) and the documented limits it is held to
//! ([`ManifestLimits`]).

use crate::errors::ErrorCode;
use crate::names::NameError;

/// Documented limits for manifests; anything larger is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestLimits {
    /// Most variants in one release (default 64).
    pub max_variants: usize,
    /// Longest release notes in bytes (default 16 KiB).
    pub max_notes: usize,
    /// Most backends per variant (default 16).
    pub max_backends: usize,
    /// Most data files, and most assets, per variant (default 16 each).
    pub max_extra_files: usize,
    /// Most SoC entries per allow or deny list (default 512).
    pub max_socs: usize,
    /// Longest short string (quant label, SoC, OS version, file name; default 128 bytes).
    pub max_short_string: usize,
    /// Most golden tensor elements per variant, inputs and outputs of every method together
    /// (default 65,536).
    pub max_golden_elements: usize,
    /// Most methods besides `forward` with a golden, per variant (default 16).
    pub max_golden_methods: usize,
    /// Largest blob (default 16 GiB).
    pub max_blob_size: u64,
}

impl Default for ManifestLimits {
    fn default() -> Self {
        Self {
            max_variants: 64,
            max_notes: 16 * 1024,
            max_backends: 16,
            max_extra_files: 16,
            max_socs: 512,
            max_short_string: 128,
            max_golden_elements: 65_536,
            max_golden_methods: 16,
            max_blob_size: 16 << 30,
        }
    }
}

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManifestError {
    /// Not JSON, or JSON of the wrong shape.
    #[error("malformed release manifest: {0}")]
    Malformed(String),
    /// A field the schema does not know (strict parsing only).
    #[error("release manifest has an unknown field {field:?}")]
    UnknownField {
        /// Dotted path of the field.
        field: String,
    },
    /// A name inside it was invalid.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A structural rule or limit was broken.
    #[error("invalid release manifest: {0}")]
    Invalid(String),
    /// The manifest is in a format this build cannot read.
    #[error(transparent)]
    Format(#[from] crate::wire::protocol::FormatError),
}

impl ManifestError {
    /// Stable machine-readable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ManifestError::Malformed(_) => ErrorCode::ManifestMalformed,
            ManifestError::UnknownField { .. } => ErrorCode::ManifestUnknownField,
            ManifestError::Name(_) => ErrorCode::ManifestInvalid,
            ManifestError::Invalid(_) => ErrorCode::ManifestInvalid,
            ManifestError::Format(_) => ErrorCode::FormatUnsupported,
        }
    }
}
