//! How a target's run ended, as the reports state it: the status, the phase a failed worker
//! reached, how a QNN context was obtained and which repeated runs differed. The execution layer
//! has its own wire types for these (`crate::execution::exec`); they are converted where a command builds its
//! report, so a change to the worker's protocol cannot change a report's schema unnoticed.

use serde::{Deserialize, Serialize};

/// How a target's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Every sample ran and outputs were written.
    Ok,
    /// ONNX Runtime refused: loading, EP registration, session creation or a run returned an error.
    Failed,
    /// The worker process died (signal, or exit without a result).
    Crashed,
    /// The worker did not finish within the timeout and was killed.
    Timeout,
    /// The target cannot run on this machine (platform, missing runtime).
    Unavailable,
}

/// How far a worker got (in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    LoadRuntime,
    RegisterEp,
    CreateSession,
    Run,
    WriteOutputs,
    Done,
}

/// How a QNN session got its compiled context (its HTP graphs), the compilation that takes
/// seconds per model on the simulator: what the report records so a reader knows which runs
/// compiled and which reused a cached context (bit-identical outputs either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextUse {
    /// Compiled from the model, and the context stored in the cache (unless ONNX Runtime could
    /// not write it: the worker's `context_note` then says why).
    Compiled,
    /// Loaded from the cache (an entry verified against its SHA-256 manifest): not compiled.
    Loaded,
    /// The cached entry did not match its manifest (or ONNX Runtime refused it): removed,
    /// compiled afresh and stored again.
    Recompiled,
    /// Compiled from the model with the cache turned off (`--no-context-cache`,
    /// `NPU_AUDIT_CONTEXT_CACHE=0`), or for a temporary model the audit built from the one
    /// audited (a sub-model, a search's candidate): nothing loaded or stored.
    Uncached,
}

/// One output of one repeated run that differed from the first run of the same sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RepeatDifference {
    /// The sample (0-based).
    pub sample: usize,
    /// The run (1-based after the first, which is run 0).
    pub run: usize,
    /// The output that differed.
    pub output: String,
    /// Elements whose bits differ (every element when the shapes differ).
    pub differing: u64,
    /// Elements of the output.
    pub elements: u64,
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RunStatus {
    /// The word used in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Failed => "failed",
            RunStatus::Crashed => "crashed",
            RunStatus::Timeout => "timeout",
            RunStatus::Unavailable => "unavailable",
        }
    }

    /// How a run that did not end well ended, as a clause: `it failed`, `it timed out`.
    pub fn ended_words(self) -> &'static str {
        match self {
            RunStatus::Ok => "it ran to the end",
            RunStatus::Failed => "it failed",
            RunStatus::Crashed => "it crashed",
            RunStatus::Timeout => "it timed out",
            RunStatus::Unavailable => "it cannot run here",
        }
    }
}

impl Phase {
    /// The name used in reports (`create_session`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::LoadRuntime => "load_runtime",
            Phase::RegisterEp => "register_ep",
            Phase::CreateSession => "create_session",
            Phase::Run => "run",
            Phase::WriteOutputs => "write_outputs",
            Phase::Done => "done",
        }
    }
}
