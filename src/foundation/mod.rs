//! The foundation: what every layer above may use and that uses nothing of the tool's own: typed
//! errors and their exit codes, `--timings` spans, SHA-256, stderr, Ctrl-C, name patterns, child
//! processes that die with the audit, the files the user named, and the host's CPU.

pub mod console;
pub mod error;
pub mod hash;
pub mod host;
pub mod interrupt;
pub mod pattern;
pub mod process;
pub mod timings;
pub mod userfile;
pub mod words;
