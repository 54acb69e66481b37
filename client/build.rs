//! Build script: with the `executorch` feature, the ExecuTorch libraries that `ferry-runtime`
//! links are linked into the client's own examples and tests too, and their folder is passed on
//! to packages that embed the client (`DEP_FERRY_CLIENT_LIB_DIR`; see docs/client.md).

include!("runtime/link_executorch.rs");

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    link_executorch_libraries();
    if let Ok(dir) = std::env::var("DEP_FERRY_EXECUTORCH_LIB_DIR") {
        println!("cargo::metadata=lib_dir={dir}");
    }
}
