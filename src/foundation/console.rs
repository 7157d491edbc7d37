//! What the tool says on stderr besides errors, at the verbosity the user chose: notes (a runtime
//! being fetched, where a file was written) unless `--quiet`, details (each session as it ends,
//! where each runtime was found) only with `--verbose`, and progress lines only when not quiet.
//! Errors are always printed, by the command line. Off a terminal, where no progress bar is
//! drawn, the command's latest [`activity`] is printed at a steady interval.

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

/// Seconds between progress lines off a terminal: `NPU_AUDIT_PROGRESS_SECS`, default 30; 0 turns
/// them off.
const PROGRESS_SECS_VAR: &str = "NPU_AUDIT_PROGRESS_SECS";
const DEFAULT_PROGRESS_SECS: u64 = 30;

/// What the command is doing now, as the progress lines say it (`None`: nothing worth a line).
static ACTIVITY: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Says what the command is doing now ("3/12 sessions; last: qnn:sm8650 ok"). Off a terminal,
/// [`start_progress_lines`] prints it at a steady interval; on a terminal the bars tell it.
pub fn activity(state: impl Into<String>) {
    if let Ok(mut a) = ACTIVITY.lock() {
        *a = Some(state.into());
    }
}

/// Starts the progress lines of this command when stderr is not a terminal (a CI log, a pipe)
/// and the user is not `--quiet`: one line every interval with the time since the command
/// started and its latest [`activity`], so a log never goes silent for minutes, whatever mix
/// of batches, evals and fetches the command runs. The thread lives as long as the process.
pub fn start_progress_lines() {
    use std::io::IsTerminal;
    let Some(every) = progress_interval().filter(|_| progress() && !std::io::stderr().is_terminal()) else {
        return;
    };
    let started = std::time::Instant::now();
    std::thread::spawn(move || loop {
        std::thread::sleep(every);
        let state = ACTIVITY.lock().ok().and_then(|a| a.clone());
        if let Some(state) = state {
            note(format_args!("[{}] {state}", elapsed_text(started.elapsed())));
        }
    });
}

/// A wait with no bar of its own (a download), told on a terminal by a line at the same
/// interval; off a terminal the command's progress lines tell it ([`activity`]). Stops when
/// dropped.
pub struct TerminalHeartbeat {
    shared: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TerminalHeartbeat {
    /// Says `state` now as the [`activity`], and on a terminal every interval until dropped.
    pub fn start(state: String) -> TerminalHeartbeat {
        use std::io::IsTerminal;
        activity(state.clone());
        let shared = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let interval = progress_interval().filter(|_| progress() && std::io::stderr().is_terminal());
        let thread = interval.map(|every| {
            let shared = shared.clone();
            std::thread::spawn(move || beat(&shared, every, &state))
        });
        TerminalHeartbeat { shared, thread }
    }
}

impl Drop for TerminalHeartbeat {
    fn drop(&mut self) {
        if let Ok(mut done) = self.shared.0.lock() {
            *done = true;
        }
        self.shared.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The interval between lines, or `None` when turned off.
fn progress_interval() -> Option<std::time::Duration> {
    let secs = std::env::var(PROGRESS_SECS_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_PROGRESS_SECS);
    (secs > 0).then(|| std::time::Duration::from_secs(secs))
}

/// Prints `state` every `every` until the wait is over; the lock is not held while printing.
fn beat(shared: &(std::sync::Mutex<bool>, std::sync::Condvar), every: std::time::Duration, state: &str) {
    let started = std::time::Instant::now();
    loop {
        let Ok(guard) = shared.0.lock() else { return };
        let Ok((done, _)) = shared.1.wait_timeout_while(guard, every, |done| !*done) else {
            return;
        };
        if *done {
            return;
        }
        drop(done);
        note(format_args!("[{}] {state}", elapsed_text(started.elapsed())));
    }
}

/// `1m 05s`, `42s`, `2h 03m`.
pub fn elapsed_text(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s:02}s"),
        (h, m, _) => format!("{h}h {m:02}m"),
    }
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

    #[test]
    fn elapsed_times_read_as_a_clock() {
        use super::elapsed_text;
        use std::time::Duration;
        assert_eq!(elapsed_text(Duration::from_secs(42)), "42s");
        assert_eq!(elapsed_text(Duration::from_secs(65)), "1m 05s");
        assert_eq!(elapsed_text(Duration::from_secs(7380)), "2h 03m");
    }
}
