//! Build script: with the `executorch` feature, link the ExecuTorch 1.5.1 shared libraries
//! from the PyPI wheel (unpacked by `scripts/setup-executorch.sh`) and compile the small C++
//! shim that lists the backends the runtime registered.
//!
//! The folder is `$FERRY_EXECUTORCH_DIR` (with `lib/` and `include/`), by default
//! `<workspace>/.deps/executorch`.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=FERRY_EXECUTORCH_DIR");
    #[cfg(feature = "executorch")]
    executorch();
}

#[cfg(feature = "executorch")]
fn executorch() {
    use std::path::PathBuf;
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let dir = std::env::var("FERRY_EXECUTORCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| manifest.join("../../.deps/executorch"));
    let lib = dir.join("lib");
    let include = dir.join("include");
    if !lib.join("libexecutorch.so").is_file() {
        println!(
            "cargo::error=the executorch feature needs the ExecuTorch runtime libraries in {}; run scripts/setup-executorch.sh",
            lib.display()
        );
        return;
    }
    println!("cargo::rerun-if-changed={}", lib.display());
    println!("cargo::rustc-link-search=native={}", lib.display());
    println!("cargo::rustc-link-lib=dylib=executorch");
    println!("cargo::rustc-link-lib=dylib=stdc++");
    // Backends and kernels register themselves from static constructors: keep them linked.
    println!(
        "cargo::rustc-link-arg=-Wl,--no-as-needed,-lexecutorch_kernels_optimized,-lexecutorch_kernels_quantized,-lexecutorch_backend_xnnpack,-lexecutorch_threadpool,--as-needed"
    );
    println!("cargo::rustc-link-arg=-Wl,-rpath,{}", lib.display());
    // Link arguments do not reach the binaries of dependent packages: they read this (as
    // DEP_FERRY_EXECUTORCH_LIB_DIR) in their own build script (client/runtime/link_executorch.rs); see docs/client.md.
    println!("cargo::metadata=lib_dir={}", lib.display());
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(&include)
        .include(include.join("executorch/runtime/core/portable_type/c10"))
        .define("ET_EVENT_TRACER_ENABLED", None)
        .define("C10_USING_CUSTOM_GENERATED_MACROS", None)
        // module.h reads a deprecated member of its own.
        .flag_if_supported("-Wno-deprecated-declarations")
        .file("cpp/registered_backends.cpp")
        .file("cpp/registered_kernels.cpp")
        .file("cpp/log_filter.cpp")
        .file("cpp/source_loader.cpp")
        .compile("ferry_et_shim");
}
