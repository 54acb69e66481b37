//! Links the ExecuTorch backend and kernel libraries into this package's test binaries
//! (see `client/runtime/link_executorch.rs`).

include!("../client/runtime/link_executorch.rs");

fn main() {
    link_executorch_libraries();
}
