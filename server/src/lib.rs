//! `ferry-server`: the HTTP server that hosts signed `.pte` variants, and the `ferry` CLI.
//!
//! Today this holds the command-line front end ([`cli`]); the HTTP API lands with the server
//! issue.

pub mod cli;
