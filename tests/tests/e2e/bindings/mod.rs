//! The bindings: the C ABI and its header, progress from C, the JVM binding and its generated error
//! codes.

mod c_abi;
mod c_progress;
pub(crate) mod jvm;
mod jvm_typed;
