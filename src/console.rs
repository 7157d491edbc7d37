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
        line(&format!("npu-audit: {message}"));
    }
}

/// A detail for a user who asked to see more (`-v`).
pub fn detail(message: impl std::fmt::Display) {
    if level() == Verbosity::Verbose {
        line(&format!("npu-audit: {message}"));
    }
}

/// The one line that says why a command failed (`npu-audit: error: ...`), always printed.
pub fn error(message: &str) {
    line(&format!("npu-audit: error: {message}"));
}

/// Writes one line on stderr, its control characters escaped (names in an error come from
/// models and runtimes). A closed or full stderr is ignored rather than turned into a panic.
fn line(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{}", printable(text));
}

/// Text taken from a model or a runtime (tensor names, errors) with control characters and
/// bidirectional overrides shown escaped, so it can neither move a terminal's cursor, set its
/// title, reorder what is shown, nor break a table or a line.
pub fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() || is_bidi_control(c) {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Unicode's explicit direction marks, embeddings, overrides and isolates.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn escape_sequences_and_direction_overrides_are_shown_not_obeyed() {
        assert_eq!(printable("a\u{1b}]0;pwn\u{7}b"), "a\\u{1b}]0;pwn\\u{7}b");
        assert_eq!(printable("x\u{202e}y\u{9b}2J"), "x\\u{202e}y\\u{9b}2J");
        assert_eq!(printable("plain/名前:0"), "plain/名前:0");
    }
}
