//! `ferry-server`: the HTTP server that hosts signed `.pte` variants, and the `ferry` CLI.
//!
//! - [`api`]: routes and handlers (device, admin, operations);
//! - [`publish`]: streamed blob uploads and release admission;
//! - [`catalog`]: the in-memory catalog resolve reads;
//! - [`config`], [`keys`], [`auth`], [`storage`], [`metrics`], [`error`]: the plumbing;
//! - [`sign`]: building and signing release manifests (`ferry sign`);
//! - [`server`]: start-up, TLS and a thread-hosted server for tests;
//! - [`demo`]: the built-in demo model;
//! - [`cli`]: the `ferry` command line.

pub mod api;
pub mod auth;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod demo;
pub mod error;
pub mod fleet;
pub mod fsutil;
pub mod keys;
pub mod metrics;
pub mod publish;
pub mod revisions;
pub mod rollout;
pub mod server;
pub mod sign;
pub mod storage;
pub mod telemetry;
