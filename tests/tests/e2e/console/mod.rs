//! The operator console and dashboard in a real browser (Chromium).

mod dashboard;
mod experiment;
mod operator;
