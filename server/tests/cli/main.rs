//! The `ferry` command line run as operators run it: one binary, one module per command group.

mod cli_durability;
mod cli_evaluate;
mod cli_inspect;
mod cli_json;
mod cli_keys;
mod cli_ops;
mod cli_publish;
mod cli_publish_checks;
mod cli_ramp;
mod cli_revoke;
mod cli_rollout;
mod cli_storage_full;
mod common;
mod deploy;
mod readme;
