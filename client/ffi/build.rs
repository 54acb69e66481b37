//! Links the ExecuTorch backend and kernel libraries into the C library.
//!
//! ferry-client (feature `executorch`) links `libexecutorch.so`, but link arguments do not
//! propagate to dependents' binaries, and the backend/kernel libraries register themselves
//! from static constructors, so nothing references them and `--as-needed` would drop them.
//! Every binary that embeds the client with the real runtime does what this script does.

fn main() {
    println!("cargo::rerun-if-env-changed=DEP_FERRY_EXECUTORCH_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_FERRY_EXECUTORCH_LIB_DIR") {
        println!("cargo::rustc-link-search=native={dir}");
        println!(
            "cargo::rustc-link-arg=-Wl,--no-as-needed,-lexecutorch_kernels_optimized,-lexecutorch_kernels_quantized,-lexecutorch_backend_xnnpack,-lexecutorch_threadpool,--as-needed"
        );
        println!("cargo::rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
