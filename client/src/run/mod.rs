//! Run: a model in the runtime. The [`model`] apps run, the golden check of a fresh load
//! (`golden`), run timings for field latency (`inference`), and the signed metadata a
//! loaded variant hands out (`metadata`).

pub(crate) mod golden;
pub(crate) mod inference;
pub(crate) mod metadata;
pub mod model;
