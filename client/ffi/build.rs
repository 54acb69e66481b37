//! Links the ExecuTorch backend and kernel libraries into the C library
//! (see `client/runtime/link_executorch.rs`).

include!("../runtime/link_executorch.rs");

fn main() {
    link_executorch_libraries();
}
