// Shared by the build scripts of packages whose binaries embed the ExecuTorch runtime through
// `ferry-runtime` (the client, the C library, the server with `executorch`, the tests;
// `include!`d; see docs/client.md).
//
// `ferry-runtime` links `libexecutorch.so`, but link arguments do not propagate to dependents'
// binaries, and the backend/kernel libraries register themselves from static constructors, so
// nothing references them and `--as-needed` would drop them. This links them explicitly and
// sets an rpath, from the folder `ferry-runtime`'s build script publishes to its direct
// dependents (`DEP_FERRY_EXECUTORCH_LIB_DIR`) and `ferry-client`'s passes on to its own
// (`DEP_FERRY_CLIENT_LIB_DIR`).

/// Emits the link arguments for the ExecuTorch backend and kernel libraries.
fn link_executorch_libraries() {
    println!("cargo::rerun-if-env-changed=DEP_FERRY_EXECUTORCH_LIB_DIR");
    println!("cargo::rerun-if-env-changed=DEP_FERRY_CLIENT_LIB_DIR");
    let dir = std::env::var("DEP_FERRY_EXECUTORCH_LIB_DIR")
        .or_else(|_| std::env::var("DEP_FERRY_CLIENT_LIB_DIR"));
    if let Ok(dir) = dir {
        println!("cargo::rustc-link-search=native={dir}");
        println!(
            "cargo::rustc-link-arg=-Wl,--no-as-needed,-lexecutorch_kernels_optimized,-lexecutorch_kernels_quantized,-lexecutorch_backend_xnnpack,-lexecutorch_threadpool,--as-needed"
        );
        println!("cargo::rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
