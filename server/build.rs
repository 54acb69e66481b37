//! With the `executorch` feature, links the ExecuTorch backend and kernel libraries into the
//! `ferry` binary and the tests (see `client/runtime/link_executorch.rs`).

include!("../client/runtime/link_executorch.rs");

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    link_executorch_libraries();
}
