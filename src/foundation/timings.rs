//! Where an audit's time goes (`--timings`): the parent process's own work split into phases, and
//! every worker session's time split into what the worker reported (runtime load, EP
//! registration, session creation, runs, writing outputs) and the rest (process spawn, exit,
//! result exchange).
//!
//! Parent phases are measured as *exclusive* spans on a per-thread stack: while a nested span is
//! open, the enclosing one is paused, so the phases of one thread add up to its wall time and
//! nothing is counted twice. Each span is filed under the current *stage* (the part of the audit
//! it belongs to: the golden run, the outputs-only run, the per-layer runs...). Worker time is
//! recorded apart: workers run concurrently, so their sums may exceed the wall time, and the
//! parent's `sessions` phase is the wall time spent waiting for them.
//!
//! Recording is off unless [`enable`] was called; a disabled span costs one atomic load. This
//! module depends on nothing else in the crate, so that the lowest layers (tensor files, model
//! writing) can be measured without their dependencies pointing upwards.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ENABLED: AtomicBool = AtomicBool::new(false);
static TOTALS: Mutex<Totals> = Mutex::new(Totals {
    started: None,
    parent: BTreeMap::new(),
    workers: BTreeMap::new(),
});

/// The parent phases the audit's own work is split into. Names are stable: they are the report's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "AuditPhase")]
pub enum Phase {
    /// Resolving and fetching ONNX Runtime builds and plugins.
    Provision,
    /// Loading and checking the models, inputs and golden run.
    Prepare,
    /// Building rewritten models in memory (tapped, prefix and isolation models).
    #[serde(rename = "rewrite_models")]
    Rewrite,
    /// Encoding rewritten models and writing them to disk.
    WriteModels,
    /// Waiting for worker sessions (their own split is in the workers' table).
    Sessions,
    /// Reading tensors back from the files workers wrote.
    ReadTensors,
    /// Pairing the audited model's tensors with the reference's.
    Matching,
    /// Comparing tensors: metrics, accumulators, agreement.
    Compare,
    /// Writing the saved outputs, logs and findings.
    Persist,
    /// Rendering the report in its formats and writing it.
    Render,
    /// Everything else the parent did in this stage.
    Other,
}

/// What one worker session reported about its own time, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerTime {
    pub load: f64,
    pub register: f64,
    pub session_create: f64,
    pub run: f64,
    /// Reading the inputs and writing the outputs.
    pub io: f64,
    /// Spawn to exit as the parent saw it.
    pub wall: f64,
    /// The worker's peak resident memory in MiB (a maximum over sessions, not a sum).
    pub peak_rss_mb: f64,
}

/// The sums of one (stage, target) over its sessions.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkerTotals {
    pub sessions: usize,
    pub time: WorkerTime,
}

/// The sum of one (stage, phase) in the parent.
#[derive(Debug, Clone, Copy, Default)]
pub struct PhaseTotal {
    pub elapsed: Duration,
    /// How many spans were opened.
    pub count: usize,
}

/// Everything recorded since [`enable`].
#[derive(Debug, Clone, Default)]
pub struct Totals {
    started: Option<Instant>,
    /// (stage, phase) -> time.
    pub parent: BTreeMap<(&'static str, Phase), PhaseTotal>,
    /// (stage, target) -> worker sums.
    pub workers: BTreeMap<(&'static str, String), WorkerTotals>,
}

impl Totals {
    /// Wall time since recording began.
    pub fn wall(&self) -> Duration {
        self.started.map(|s| s.elapsed()).unwrap_or_default()
    }
}

struct Open {
    stage: &'static str,
    phase: Phase,
    /// When the span last resumed (it pauses while a nested span is open).
    resumed: Instant,
    /// Whether the span opened with the first add (a span re-opened after a pause adds no count).
    counted: bool,
}

thread_local! {
    static STACK: RefCell<Vec<Open>> = const { RefCell::new(Vec::new()) };
    static STAGE: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

/// Starts recording (the `--timings` flag). Everything before is not measured.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
    if let Ok(mut t) = TOTALS.lock() {
        *t = Totals {
            started: Some(Instant::now()),
            ..Totals::default()
        };
    }
}

/// Whether `--timings` is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// What was recorded so far.
pub fn snapshot() -> Totals {
    TOTALS.lock().map(|t| t.clone()).unwrap_or_default()
}

fn add(stage: &'static str, phase: Phase, elapsed: Duration, count: usize) {
    if let Ok(mut t) = TOTALS.lock() {
        let e = t.parent.entry((stage, phase)).or_default();
        e.elapsed += elapsed;
        e.count += count;
    }
}

fn current_stage() -> &'static str {
    STAGE.with(|s| s.borrow().last().copied().unwrap_or("audit"))
}

/// An open parent phase; closed when dropped.
#[must_use = "the phase ends when this is dropped"]
pub struct Span {
    active: bool,
}

/// Opens a phase of the parent's work in the current stage, pausing the enclosing phase.
pub fn span(phase: Phase) -> Span {
    if !enabled() {
        return Span { active: false };
    }
    let now = Instant::now();
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if let Some(top) = s.last_mut() {
            add(top.stage, top.phase, now - top.resumed, usize::from(!top.counted));
            top.counted = true;
        }
        s.push(Open {
            stage: current_stage(),
            phase,
            resumed: now,
            counted: false,
        });
    });
    Span { active: true }
}

impl Drop for Span {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        let now = Instant::now();
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            if let Some(open) = s.pop() {
                add(open.stage, open.phase, now - open.resumed, usize::from(!open.counted));
            }
            if let Some(top) = s.last_mut() {
                top.resumed = now;
            }
        });
    }
}

/// Runs `f` as one phase.
pub fn time<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    let _span = span(phase);
    f()
}

/// A stage of the audit; spans opened while it is current are filed under it. Closed when
/// dropped (the enclosing stage becomes current again).
#[must_use = "the stage ends when this is dropped"]
pub struct Stage {
    /// The stage's own `other` phase (time in the stage outside any named phase); `None` when
    /// recording is off and no stage was entered.
    other: Option<Span>,
}

/// Makes `name` the current stage.
pub fn stage(name: &'static str) -> Stage {
    if !enabled() {
        return Stage { other: None };
    }
    STAGE.with(|s| s.borrow_mut().push(name));
    Stage {
        other: Some(span(Phase::Other)),
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        // The stage's `other` span closes first, while the stage is still current.
        if self.other.take().is_some() {
            STAGE.with(|s| s.borrow_mut().pop());
        }
    }
}

/// Records one worker session of `target` in the current stage.
pub fn worker(target: &str, time: WorkerTime) {
    if !enabled() {
        return;
    }
    let stage = current_stage();
    if let Ok(mut t) = TOTALS.lock() {
        let e = t.workers.entry((stage, target.to_string())).or_default();
        e.sessions += 1;
        let w = &mut e.time;
        w.load += time.load;
        w.register += time.register;
        w.session_create += time.session_create;
        w.run += time.run;
        w.io += time.io;
        w.wall += time.wall;
        w.peak_rss_mb = w.peak_rss_mb.max(time.peak_rss_mb);
    }
}

/// This process's peak resident set size in MiB so far (`getrusage`), 0 where the system
/// cannot say. Workers report theirs in their result; the audit reports its own.
pub fn peak_rss_mb() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    // Linux reports kilobytes.
    usage.ru_maxrss as f64 / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: &Totals, stage: &'static str, phase: Phase) -> f64 {
        t.parent
            .get(&(stage, phase))
            .map_or(0.0, |p| p.elapsed.as_secs_f64() * 1e3)
    }

    /// Nested spans are exclusive: the outer phase does not count the inner one's time, and the
    /// phases of a stage add up to the stage's wall time.
    #[test]
    fn nested_spans_are_exclusive() {
        enable();
        let started = Instant::now();
        {
            let _st = stage("test-stage");
            let _outer = span(Phase::Compare);
            std::thread::sleep(Duration::from_millis(30));
            time(Phase::ReadTensors, || std::thread::sleep(Duration::from_millis(60)));
            std::thread::sleep(Duration::from_millis(30));
        }
        let wall = started.elapsed().as_secs_f64() * 1e3;
        let t = snapshot();
        let compare = ms(&t, "test-stage", Phase::Compare);
        let read = ms(&t, "test-stage", Phase::ReadTensors);
        let other = ms(&t, "test-stage", Phase::Other);
        // Sleeps last at least as long as asked; the sum equals the wall time whatever the
        // machine's noise, and would exceed it by the inner span if spans were not exclusive.
        assert!(compare >= 60.0, "compare {compare}");
        assert!(read >= 60.0, "read {read}");
        assert!(
            (compare + read + other - wall).abs() < 1.0,
            "{compare}+{read}+{other} vs {wall}"
        );
        assert_eq!(t.parent[&("test-stage", Phase::Compare)].count, 1);
    }
}
