//! What the tool says on stderr besides errors, at the verbosity the user chose: notes (a runtime
//! being fetched, where a file was written) unless `--quiet`, details (each session as it ends,
//! where each runtime was found) only with `--verbose`, and progress lines only when not quiet.
//! Errors are always printed, by the command line.

use std::sync::atomic::{AtomicU8, Ordering};

/// How much the tool says on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet = 0,
    Normal = 1,
    Verbose = 2,
}

static LEVEL: AtomicU8 = AtomicU8::new(Verbosity::Normal as u8);

/// Sets the verbosity of this process.
pub fn set(v: Verbosity) {
    LEVEL.store(v as u8, Ordering::Relaxed);
}

/// The verbosity of this process.
pub fn level() -> Verbosity {
    match LEVEL.load(Ordering::Relaxed) {
        0 => Verbosity::Quiet,
        1 => Verbosity::Normal,
        _ => Verbosity::Verbose,
    }
}

/// Whether progress lines are drawn (they also need a terminal).
pub fn progress() -> bool {
    level() > Verbosity::Quiet
}

/// A note to the user (`npu-audit: ...`), unless quiet.
pub fn note(message: impl std::fmt::Display) {
    if level() > Verbosity::Quiet {
        eprintln!("npu-audit: {message}");
    }
}

/// A detail for a user who asked to see more (`-v`).
pub fn detail(message: impl std::fmt::Display) {
    if level() == Verbosity::Verbose {
        eprintln!("npu-audit: {message}");
    }
}
