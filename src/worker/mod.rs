//! Isolation: every target (and the golden reference run) executes in its own child process, so
//! two ONNX Runtime builds never share a process and a crashing or hanging vendor EP becomes a
//! status in the report instead of the end of the audit.

pub mod child;
pub mod job;
pub mod placement;
pub mod pool;

pub use job::{EpSetup, InputFile, Job, JobResult, OutputFile};
pub use pool::{run_all, Outcome, PoolConfig, RunStatus};
