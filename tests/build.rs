//! Links the ExecuTorch backend and kernel libraries into this package's test binaries
//! (see `client/link_executorch.rs`).

include!("../client/link_executorch.rs");

fn main() {
    link_executorch_libraries();
}
