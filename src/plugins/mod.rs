//! Where plugins come from, before any of them runs: manifests, discovery in
//! the home and the project, `config.json`, the bundled plugins, installs and
//! Python entry points.

pub mod atomic;
pub mod bundled;
pub mod config;
pub mod deps;
pub mod discovery;
pub mod entry_points;
pub mod format;
pub mod install;
pub mod lock;
pub mod manifest;
pub mod snapshot;
