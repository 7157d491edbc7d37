//! The parent side: runs each job in its own child process of this binary, at most `jobs` at once,
//! each under a timeout, and turns however the child ended into a status.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wait_timeout::ChildExt;

use super::job::{Job, JobResult};

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
}

/// The outcome of one job.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: RunStatus,
    pub error: Option<String>,
    pub result: Option<JobResult>,
    /// Wall time of the child process, spawn to exit.
    pub wall_ms: f64,
    /// The worker's stderr (ONNX Runtime's own log lines).
    pub log: PathBuf,
}

/// Limits for a batch of jobs.
#[derive(Debug, Clone, Copy)]
pub struct PoolConfig {
    pub max_parallel: usize,
    pub timeout: Duration,
}

/// Environment variable that makes a worker misbehave on purpose, for testing how the audit
/// reports it: `TARGET_ID=crash|hang|exit[;TARGET_ID=...]`.
pub const FAULT_INJECTION_ENV: &str = "NPU_AUDIT_FAULT_INJECT";

/// Runs every job and returns the outcomes in the order of `jobs`. `on_done` is called as each
/// job finishes (for progress display).
pub fn run_all(jobs: &[(Job, PathBuf)], config: PoolConfig, on_done: &(dyn Fn(&Job, &Outcome) + Sync)) -> Vec<Outcome> {
    let queue: Mutex<VecDeque<usize>> = Mutex::new((0..jobs.len()).collect());
    let results: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; jobs.len()]);
    let threads = config.max_parallel.clamp(1, jobs.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                if crate::foundation::interrupt::stopping() {
                    break;
                }
                let next = queue.lock().map(|mut q| q.pop_front()).unwrap_or(None);
                let Some(i) = next else { break };
                let (job, dir) = &jobs[i];
                let outcome = run_one(job, dir, config.timeout);
                on_done(job, &outcome);
                if let Ok(mut r) = results.lock() {
                    r[i] = Some(outcome);
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    results
        .into_iter()
        .zip(jobs)
        .map(|(r, (_, dir))| {
            r.unwrap_or_else(|| Outcome {
                status: RunStatus::Crashed,
                error: Some("the audit lost track of this worker".into()),
                result: None,
                wall_ms: 0.0,
                log: dir.join("worker.log"),
            })
        })
        .collect()
}

/// Waits for a worker until it exits, the timeout passes or the audit is interrupted; in the last
/// two cases kills it (this thread owns the child, so the process is never signalled after it
/// was reaped). `Ok(None)` means it was killed.
fn wait_or_kill(
    child: &mut std::process::Child,
    start: Instant,
    timeout: Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    const SLICE: Duration = Duration::from_millis(100);
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() || crate::foundation::interrupt::stopping() {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        if let Some(status) = child.wait_timeout(left.min(SLICE))? {
            return Ok(Some(status));
        }
    }
}

/// Writes the job file and the command that starts a worker process on it (dying with the audit),
/// its stderr going to `log`.
pub(super) fn worker_command(job: &Job, dir: &Path, log: &Path) -> Result<Command, String> {
    // The job's directory and its output directory (elsewhere when tensors go to shared memory).
    for d in [dir, job.output_dir.as_path()] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    let job_path = dir.join("job.json");
    let bytes = serde_json::to_vec_pretty(job).map_err(|e| format!("cannot encode the job: {e}"))?;
    std::fs::write(&job_path, bytes).map_err(|e| format!("cannot write {}: {e}", job_path.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the npu-audit executable: {e}"))?;
    let log_file = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    if let Some((emulation, core)) = &job.emulated {
        let mut cmd = emulation.worker_command(core, &job_path);
        cmd.envs(job.environment.iter().map(|(k, v)| (k, v)));
        // The emulated worker injects the tests' faults as the native one does; its environment
        // is otherwise clean.
        if let Ok(spec) = std::env::var(FAULT_INJECTION_ENV) {
            cmd.env(FAULT_INJECTION_ENV, spec);
        }
        crate::foundation::process::die_with_parent(&mut cmd).stderr(Stdio::from(log_file));
        return Ok(cmd);
    }
    let mut cmd = Command::new(exe);
    // A cap left in the user's shell would change OpenVINO's figures without the report saying.
    for name in [crate::data::target::ONEDNN_ISA_VARIABLE, "DNNL_MAX_CPU_ISA"] {
        cmd.env_remove(name);
    }
    cmd.envs(job.environment.iter().map(|(k, v)| (k, v)));
    crate::foundation::process::die_with_parent(&mut cmd)
        .arg("__worker")
        .arg(&job_path)
        .stderr(Stdio::from(log_file));
    Ok(cmd)
}

/// Writes the job file and starts a worker process on it, its stderr going to `log`.
fn spawn_worker(job: &Job, dir: &Path, log: &Path) -> Result<std::process::Child, String> {
    worker_command(job, dir, log)?
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start a worker process: {e}"))
}

/// The exit code of a worker that could not write its result because its disk is full.
pub const WORKER_NO_SPACE: i32 = 28;

fn run_one(job: &Job, dir: &Path, timeout: Duration) -> Outcome {
    let log = dir.join("worker.log");
    let fail = |status: RunStatus, error: String, wall_ms: f64| Outcome {
        status,
        error: Some(error),
        result: None,
        wall_ms,
        log: log.clone(),
    };
    if crate::foundation::interrupt::stopping() {
        return fail(RunStatus::Crashed, "the audit was interrupted".into(), 0.0);
    }
    let start = Instant::now();
    let mut child = match spawn_worker(job, dir, &log) {
        Ok(c) => c,
        Err(e) => return fail(RunStatus::Crashed, e, 0.0),
    };
    let waited = wait_or_kill(&mut child, start, timeout);
    let wall_ms = start.elapsed().as_secs_f64() * 1e3;
    let status = match waited {
        Ok(Some(s)) => s,
        Ok(None) if crate::foundation::interrupt::stopping() => {
            return fail(RunStatus::Crashed, "the audit was interrupted".into(), wall_ms)
        }
        Ok(None) => {
            let why = format!(
                "did not finish within {} s and was killed{}",
                timeout.as_secs_f64(),
                log_tail(&log)
            );
            return fail(RunStatus::Timeout, why, wall_ms);
        }
        Err(e) => {
            let _ = child.kill();
            return fail(RunStatus::Crashed, format!("lost the worker process: {e}"), wall_ms);
        }
    };
    if let Some(signal) = exit_signal(&status) {
        let why = format!(
            "worker killed by signal {signal} ({}){}",
            signal_name(signal),
            log_tail(&log)
        );
        return fail(RunStatus::Crashed, why, wall_ms);
    }
    let result: Option<JobResult> = std::fs::read(job.output_dir.join("result.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    match (status.success(), result) {
        (true, Some(r)) => {
            let (status, error) = if r.ok {
                (RunStatus::Ok, None)
            } else {
                (
                    RunStatus::Failed,
                    Some(
                        r.error
                            .clone()
                            .unwrap_or_else(|| "failed without an error message".into()),
                    ),
                )
            };
            Outcome {
                status,
                error,
                result: Some(r),
                wall_ms,
                log,
            }
        }
        _ => {
            let code = status.code().unwrap_or(-1);
            fail(
                RunStatus::Crashed,
                format!("worker exited with code {code} without a result{}", log_tail(&log)),
                wall_ms,
            )
        }
    }
}

#[cfg(unix)]
fn exit_signal(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn exit_signal(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// The last non-empty lines of the worker's log, to explain a crash.
pub(super) fn log_tail(log: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(log) else {
        return String::new();
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let tail = &lines[lines.len().saturating_sub(3)..];
    format!("; last log lines: {}", tail.join(" | "))
}

/// With [`FAULT_INJECTION_ENV`] `TARGET_ID=refuse-output:NAME`: the output a worker of that
/// target must refuse to return (the session then fails, as an EP that cannot return a tensor
/// does), so tests can check how the per-layer audit isolates such a tensor.
pub fn refused_output(target_id: &str) -> Option<String> {
    let spec = std::env::var(FAULT_INJECTION_ENV).ok()?;
    spec.split(';').find_map(|item| {
        let (id, fault) = item.split_once('=')?;
        (id == target_id).then_some(())?;
        fault.strip_prefix("refuse-output:").map(str::to_string)
    })
}

/// Applies [`FAULT_INJECTION_ENV`] inside a worker: crash, hang or exit without a result.
pub fn inject_fault(target_id: &str) {
    for fault in faults(target_id) {
        match fault.as_str() {
            "crash" => crash(),
            "hang" => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            "exit" => std::process::exit(7),
            _ => {}
        }
    }
}

/// The faults injected into target `target_id` (`NPU_AUDIT_FAULT_INJECT`, `id=fault;...`).
fn faults(target_id: &str) -> Vec<String> {
    let Ok(spec) = std::env::var(FAULT_INJECTION_ENV) else {
        return Vec::new();
    };
    spec.split(';')
        .filter_map(|item| item.split_once('='))
        .filter(|(id, _)| *id == target_id)
        .map(|(_, fault)| fault.to_string())
        .collect()
}

fn crash() -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "npu-audit worker: injected crash");
    std::process::abort();
}

/// For the tests of serving workers: the fault injected before the `n`-th sample (1-based) a
/// worker serves. `slow` sleeps 100 ms before every sample; `crash@N` aborts before sample N.
pub fn inject_sample_fault(target_id: &str, n: usize) {
    for fault in faults(target_id) {
        if fault == "slow" {
            std::thread::sleep(Duration::from_millis(100));
        } else if fault.strip_prefix("crash@").and_then(|k| k.parse::<usize>().ok()) == Some(n) {
            crash();
        }
    }
}
