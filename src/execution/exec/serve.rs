//! A serving worker: one warm session, fed sample after sample over a pipe ([`super::wire`]),
//! for a whole eval set. The worker is still its own process (a vendor EP that crashes costs only
//! its target), the session is created once, and nothing is written per sample: memory and disk
//! stay flat however long the set. Samples may be sent ahead (pipelined); answers come back in
//! order.

use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::job::{Job, JobResult};
use super::pool::{log_tail, worker_command, RunStatus};
use super::wire::{read_frame, write_request, Frame};
use crate::data::tensor::Tensor;

/// How a serving worker stopped serving.
#[derive(Debug, Clone)]
pub struct Stopped {
    pub status: RunStatus,
    pub error: String,
}

/// A serving worker, its session created.
pub struct ServeSession {
    child: Child,
    stdin: Option<BufWriter<ChildStdin>>,
    frames: Receiver<anyhow::Result<Frame>>,
    log: PathBuf,
    timeout: Duration,
    /// What the worker said of its session when it was ready: runtime, placement, output types,
    /// the time it took.
    pub ready: JobResult,
    /// Samples sent and not answered yet.
    in_flight: usize,
    /// When the worker was started (its session has the timeout from then).
    spawned: Instant,
    /// The session's own time on the samples it answered, and how many.
    busy_ms: f64,
    answered: usize,
    /// The session's own time on each sample it answered, in order.
    run_ms: Vec<f64>,
}

/// The answer to one sample: its outputs, or the error the runtime gave for it.
pub type Answer = Result<Vec<(String, Tensor)>, String>;

impl ServeSession {
    /// Starts a worker on `job` (its samples ignored) in `dir`; [`ServeSession::await_ready`]
    /// then waits for its session. Call it on the thread that keeps the session: the worker dies
    /// with the thread that started it (`process::die_with_parent`).
    pub fn spawn(job: &Job, dir: &Path, timeout: Duration) -> Result<ServeSession, Stopped> {
        let log = dir.join("worker.log");
        let crashed = |error: String| Stopped {
            status: RunStatus::Crashed,
            error,
        };
        let mut cmd = worker_command(job, dir, &log).map_err(crashed)?;
        let mut child = cmd
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| crashed(format!("cannot start a worker process: {e}")))?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => return Err(crashed("the worker's pipes are missing".into())),
        };
        let (tx, frames) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                match read_frame(&mut reader) {
                    Ok(Some(frame)) => {
                        if tx.send(Ok(frame)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
        });
        Ok(ServeSession {
            child,
            stdin: Some(BufWriter::new(stdin)),
            frames,
            log,
            timeout,
            ready: JobResult::starting(),
            in_flight: 0,
            spawned: Instant::now(),
            busy_ms: 0.0,
            answered: 0,
            run_ms: Vec::new(),
        })
    }

    /// Waits until the worker's session is created, at most the timeout from when it was
    /// spawned (sessions spawned together are created at once, whatever order they are awaited
    /// in). A worker that fails to create it is a [`Stopped`] with the runtime's words.
    pub fn await_ready(mut self) -> Result<ServeSession, Stopped> {
        let left = self.timeout.saturating_sub(self.spawned.elapsed());
        self.ready = self.ready_frame(left)?;
        Ok(self)
    }

    /// The worker's first frame: its session is created (a result the worker wrote instead means
    /// it failed to create it).
    fn ready_frame(&mut self, within: Duration) -> Result<JobResult, Stopped> {
        match self.next_frame(within)? {
            Frame::Error(e) => Err(self.stop(RunStatus::Failed, e)),
            Frame::Ready(json) => serde_json::from_slice(&json).map_err(|e| Stopped {
                status: RunStatus::Crashed,
                error: format!("the worker's session description is damaged: {e}"),
            }),
            other => Err(self.stop(
                RunStatus::Crashed,
                format!("the worker answered {other:?} before it was ready"),
            )),
        }
    }

    /// How many samples it answered.
    pub fn answered(&self) -> usize {
        self.answered
    }

    /// How many samples are sent and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The session's mean time per answered sample, in milliseconds (its own run time, not the
    /// time samples waited in the pipe).
    pub fn mean_run_ms(&self) -> Option<f64> {
        (self.answered > 0).then(|| self.busy_ms / self.answered as f64)
    }

    /// Sends one sample (its answer comes back in order through [`ServeSession::receive`]). A
    /// worker that can no longer take samples (it died) still has its earlier answers read: its
    /// input is closed here, and the receive that finds no answer says how it stopped.
    pub fn send(&mut self, inputs: &[(String, Tensor)]) {
        let sent = match self.stdin.as_mut() {
            Some(w) => write_request(w, inputs).is_ok(),
            None => false,
        };
        if !sent {
            self.stdin = None;
        }
        self.in_flight += 1;
    }

    /// The answer to the oldest sample sent, waiting at most the timeout for it.
    pub fn receive(&mut self) -> Result<Answer, Stopped> {
        let frame = self.next_frame(self.timeout)?;
        self.in_flight = self.in_flight.saturating_sub(1);
        match frame {
            Frame::Outputs { outputs, run_ms } => {
                self.busy_ms += run_ms;
                self.answered += 1;
                self.run_ms.push(run_ms);
                Ok(Ok(outputs))
            }
            Frame::Error(e) => Ok(Err(e)),
            other => Err(self.stop(RunStatus::Crashed, format!("the worker answered {other:?}"))),
        }
    }

    /// The next frame within `within`, or how the worker stopped: timed out, crashed,
    /// interrupted.
    fn next_frame(&mut self, within: Duration) -> Result<Frame, Stopped> {
        let start = Instant::now();
        loop {
            if crate::foundation::interrupt::stopping() {
                return Err(self.stop(RunStatus::Crashed, "the audit was interrupted".into()));
            }
            let left = within.saturating_sub(start.elapsed());
            if left.is_zero() {
                let why = format!(
                    "did not answer within {} s and was killed{}",
                    self.timeout.as_secs_f64(),
                    log_tail(&self.log)
                );
                return Err(self.stop(RunStatus::Timeout, why));
            }
            match self.frames.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(Ok(frame)) => return Ok(frame),
                Ok(Err(e)) => return Err(self.stop(RunStatus::Crashed, format!("a damaged answer: {e:#}"))),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    let why = self.exit_reason();
                    return Err(self.stop(RunStatus::Crashed, why));
                }
            }
        }
    }

    /// Why the worker's output ended: its exit status and the end of its log.
    fn exit_reason(&mut self) -> String {
        let status = self.child.wait_timeout_ms(2000);
        format!("the worker stopped ({status}){}", log_tail(&self.log))
    }

    /// Kills the worker and says how it stopped.
    fn stop(&mut self, status: RunStatus, error: String) -> Stopped {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
        Stopped { status, error }
    }

    /// Ends the session: closes the worker's input, waits for it, and returns what it measured
    /// (every run's time, its peak memory) from its result file.
    pub fn finish(mut self, result_path: &Path) -> JobResult {
        self.stdin = None;
        let _ = self.child.wait_timeout_ms(self.timeout.as_millis() as u64);
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read(result_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| self.ready.clone())
    }
}

impl ServeSession {
    /// Stops the worker at once, samples still in flight unanswered (a sequential eval's target
    /// once decided), and returns what its session said when it was ready with the times of the
    /// samples it answered.
    pub fn abandon(mut self) -> JobResult {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut result = self.ready.clone();
        result.run_ms = std::mem::take(&mut self.run_ms);
        result
    }
}

impl Drop for ServeSession {
    fn drop(&mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waiting for a child with a bound, as words for messages.
trait WaitBounded {
    fn wait_timeout_ms(&mut self, ms: u64) -> String;
}

impl WaitBounded for Child {
    fn wait_timeout_ms(&mut self, ms: u64) -> String {
        use wait_timeout::ChildExt;
        match self.wait_timeout(Duration::from_millis(ms)) {
            Ok(Some(s)) => s.to_string(),
            Ok(None) => "still running".into(),
            Err(e) => e.to_string(),
        }
    }
}
