//! Links the ExecuTorch backend and kernel libraries into the C library
//! (see `client/link_executorch.rs`).

include!("../link_executorch.rs");

fn main() {
    link_executorch_libraries();
}
