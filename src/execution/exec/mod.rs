//! Execution: every target (and the golden reference run) executes in its own child process, so
//! two ONNX Runtime builds never share a process and a crashing or hanging vendor EP becomes a
//! status in the report instead of the end of the audit. The [`Executor`] is the one way the
//! analyses run sessions: it owns the work directory, job building, parallelism, timeouts and
//! progress.

pub mod assignment;
pub mod child;
pub mod context_cache;
pub mod executor;
pub mod job;
pub mod log;
pub mod pool;
pub mod schema;
pub mod selection;
pub mod serve;
pub mod wire;

pub use executor::{ExecOptions, Executor, PlannedTarget, WorkDir};
pub use job::{EpSetup, Job, JobResult, ModelScope, OutputFile};
pub use pool::{Outcome, RunStatus};
