//! `ferry-client-ffi`: builds ferry-client's C ABI (feature `ffi`) as `libferry_client_ffi.so`
//! and `.a`. The functions are declared in `client/include/ferry.h`.

pub use ferry_client::ffi::*;
