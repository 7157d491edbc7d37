//! The one way an audit runs sessions: the [`Executor`] owns the work directory, builds the job of
//! a target or of the golden run, runs batches of jobs in worker processes (bounded parallelism,
//! timeouts, a progress line) and counts the sessions it started.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::job::{EpSetup, Job, ModelScope};
use super::pool::{run_all, Outcome, PoolConfig};
use crate::data::inputs::{InputFile, InputSet};
use crate::data::model::rewrite::{pin_input_shapes, write_model};
use crate::data::model::LoadedModel;
use crate::data::target::{Backend, OptLevel, TargetRole, TargetSpec};
use crate::execution::runtime::{catalog, Build, Provisioner, Runtime, TargetRuntime};
use crate::foundation::error::{run_error, runtime_unavailable};
use crate::foundation::timings;

/// How workers are run.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    pub timeout: Duration,
    pub jobs: Option<usize>,
    pub threads: Option<usize>,
    /// The runtimes the user pointed at.
    pub runtimes: crate::execution::runtime::RuntimeChoice,
    pub keep_work: bool,
    /// Whether QNN sessions store their compiled context in the cache and load it from there
    /// (`--no-context-cache`, `NPU_AUDIT_CONTEXT_CACHE=0` turn it off).
    pub context_cache: bool,
}

impl crate::foundation::userfile::Reads for ExecOptions {
    fn declare(&self, set: &mut crate::foundation::userfile::InputFiles) {
        let ExecOptions {
            timeout: _,
            jobs: _,
            threads: _,
            runtimes,
            keep_work: _,
            context_cache: _,
        } = self;
        set.with(runtimes);
    }
}

/// A target with its role in the audit and its runtimes: what a job is built from.
#[derive(Debug, Clone)]
pub struct PlannedTarget {
    pub spec: TargetSpec,
    pub role: TargetRole,
    /// Whether its failure fails the audit (exit code 3).
    pub required: bool,
    /// The runtimes, or why the target cannot run here.
    pub runtime: Result<TargetRuntime, String>,
}

/// How work directories are named in the system's temporary directory.
const WORK_DIR_PREFIX: &str = "npu-audit-";

/// Where workers' output tensors go when the system's temporary directory is the default one:
/// shared memory, so that a tapped run's hundreds of megabytes of activations cross from worker
/// to audit without a trip through the disk's writeback (which made the same audit's hand-off
/// vary from 0.4 to 1.3 s on one machine).
const SHARED_MEMORY: &str = "/dev/shm";

/// The room shared memory must have free for tensors to go there: far more than a tap run holds
/// under the default `--tap-memory` (each run's tensors are removed after it is measured).
const SHARED_MEMORY_MIN_FREE: u64 = 2 << 30;

/// The work directory of one audit; removed at the end unless asked to keep it, and swept by a
/// later audit if this one is killed before it can. Workers' output tensors go to a twin of it in
/// shared memory when there is one (see [`SHARED_MEMORY`]), else inside it.
pub struct WorkDir {
    dir: Option<tempfile::TempDir>,
    pub path: PathBuf,
    tensors: Option<tempfile::TempDir>,
}

impl WorkDir {
    /// Creates it in the system temporary directory.
    pub fn new(keep: bool) -> Result<WorkDir> {
        let swept = crate::foundation::process::sweep_stale(&std::env::temp_dir(), WORK_DIR_PREFIX);
        if swept > 0 {
            crate::foundation::console::detail(format!(
                "removed {swept} work director(ies) of audits that were killed"
            ));
        }
        let tensors = if keep { None } else { shared_memory_dir() };
        let dir = tempfile::Builder::new()
            .prefix(WORK_DIR_PREFIX)
            .tempdir()
            .map_err(|e| run_error(format!("cannot create a work directory: {e}")))?;
        let path = dir.path().to_path_buf();
        if keep {
            crate::foundation::console::note(format!("keeping the work directory {}", path.display()));
            Ok(WorkDir {
                path: dir.keep(),
                dir: None,
                tensors: None,
            })
        } else {
            // Kept directories carry no marker: they are the user's, never swept.
            crate::foundation::process::mark_owned(&path)
                .map_err(|e| run_error(format!("cannot write into the work directory {}: {e}", path.display())))?;
            crate::foundation::interrupt::dir_created(&path);
            // Removed at the end: its growing stream states may be kept as deltas.
            for root in std::iter::once(path.as_path()).chain(tensors.as_ref().map(|t| t.path())) {
                crate::data::tensor::delta::allow_root(root);
            }
            Ok(WorkDir {
                dir: Some(dir),
                path,
                tensors,
            })
        }
    }

    /// Where workers may write growing stream states as deltas (the directory their outputs go
    /// to), unless the work directory is kept for the user (then every file is whole `.npy`).
    fn delta_root(&self) -> Option<PathBuf> {
        self.dir.as_ref()?;
        Some(
            self.tensors
                .as_ref()
                .map_or_else(|| self.path.clone(), |t| t.path().to_path_buf()),
        )
    }

    /// Where the tensors of a job whose directory is `dir` (inside the work directory) go.
    fn tensors_of(&self, dir: &Path) -> PathBuf {
        match (&self.tensors, dir.strip_prefix(&self.path)) {
            (Some(root), Ok(relative)) => root.path().join(relative),
            _ => dir.to_path_buf(),
        }
    }
}

/// A fresh directory in shared memory for workers' tensors, when the user left the temporary
/// directory to the system (a `TMPDIR` the user chose is used for everything) and shared memory
/// has room; `None` otherwise. Marked and swept like the work directory.
fn shared_memory_dir() -> Option<tempfile::TempDir> {
    if std::env::var_os("TMPDIR").is_some() || free_bytes(Path::new(SHARED_MEMORY))? < SHARED_MEMORY_MIN_FREE {
        return None;
    }
    crate::foundation::process::sweep_stale(Path::new(SHARED_MEMORY), WORK_DIR_PREFIX);
    let dir = tempfile::Builder::new()
        .prefix(WORK_DIR_PREFIX)
        .tempdir_in(SHARED_MEMORY)
        .ok()?;
    crate::foundation::process::mark_owned(dir.path()).ok()?;
    crate::foundation::interrupt::dir_created(dir.path());
    Some(dir)
}

/// Bytes an unprivileged process may still write on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs reads the NUL-terminated path and writes only the struct it is given.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail as u64 * s.f_frsize as u64)
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = d.close();
            crate::foundation::interrupt::dir_released(&self.path);
            crate::data::tensor::delta::forget_root(&self.path);
        }
        if let Some(d) = self.tensors.take() {
            let path = d.path().to_path_buf();
            let _ = d.close();
            crate::foundation::interrupt::dir_released(&path);
            crate::data::tensor::delta::forget_root(&path);
        }
    }
}

/// Runs the worker processes of one command in its own work directory.
pub struct Executor {
    options: ExecOptions,
    work: WorkDir,
    sessions: Cell<usize>,
    /// Bytes of the largest model its workers load (file and external data), once known.
    model_bytes: Cell<u64>,
}

impl Executor {
    /// An executor with a new work directory.
    pub fn new(options: &ExecOptions) -> Result<Executor> {
        Ok(Executor {
            work: WorkDir::new(options.keep_work)?,
            options: options.clone(),
            sessions: Cell::new(0),
            model_bytes: Cell::new(0),
        })
    }

    /// Tells the executor how large the models its workers load are (the file and its external
    /// data), so that it starts no more of them at once than the machine's memory holds.
    pub fn expect_model_bytes(&self, bytes: u64) {
        self.model_bytes.set(self.model_bytes.get().max(bytes));
    }

    /// The work directory (removed when the executor is dropped, unless `--keep-work`).
    pub fn work(&self) -> &Path {
        &self.work.path
    }

    /// Removes a directory of the work directory that is done with (a tap run's), and the
    /// tensors its jobs returned, unless `--keep-work`.
    pub fn discard(&self, dir: &Path) {
        if !self.options.keep_work {
            let _ = std::fs::remove_dir_all(dir);
            let _ = std::fs::remove_dir_all(self.work.tensors_of(dir));
        }
    }

    /// The options it runs with.
    pub fn options(&self) -> &ExecOptions {
        &self.options
    }

    /// Worker sessions started so far.
    pub fn sessions(&self) -> usize {
        self.sessions.get()
    }

    /// Intra-op threads of every session: `--threads`, else [`DEFAULT_INTRA_OP_THREADS`],
    /// never derived from the machine.
    pub fn threads(&self) -> usize {
        self.options.threads.unwrap_or(DEFAULT_INTRA_OP_THREADS)
    }

    /// The job with the compiled-context cache given to it if it is a QNN job of a model audited
    /// whole ([`ModelScope::Whole`]), unless the audit runs without the cache: a temporary
    /// sub-model compiles without storing its context. Every job passes here ([`Executor::run`]; `eval`'s serving
    /// workers before they start).
    pub fn prepared(&self, mut job: Job) -> Job {
        if let EpSetup::Plugin {
            ep_name, context_cache, ..
        } = &mut job.ep
        {
            let qnn = ep_name.as_str() == super::job::QNN_EP;
            let store = qnn && self.options.context_cache && job.scope == ModelScope::Whole;
            *context_cache = store.then(crate::execution::runtime::contexts::store_root);
        }
        job
    }

    /// Runs the jobs with a progress line on stderr (a bar on a terminal, a line at a steady
    /// interval off it) and returns their outcomes in order.
    pub fn run(&self, jobs: &[(Job, PathBuf)]) -> Result<Vec<Outcome>> {
        let _span = timings::span(timings::Phase::Sessions);
        self.sessions.set(self.sessions.get() + jobs.len());
        let config = pool_config(&self.options, jobs.len(), self.model_bytes.get());
        let target = if crate::foundation::console::progress() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(jobs.len() as u64), target);
        if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos}/{len} sessions  {msg}") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(200));
        crate::foundation::console::activity(format!("0/{} sessions", jobs.len()));
        let jobs: Vec<(Job, PathBuf)> = jobs
            .iter()
            .map(|(job, dir)| {
                let mut job = self.prepared(job.clone());
                job.output_dir = self.work.tensors_of(&job.output_dir);
                if job.emulated.is_some() {
                    // The emulated worker reads and writes every tensor whole.
                    whole_inputs(&mut job, &dir.join("whole"))?;
                } else {
                    job.delta_root = self.work.delta_root();
                }
                Ok((job, dir.clone()))
            })
            .collect::<Result<_>>()?;
        let jobs = jobs.as_slice();
        let outcomes = run_all(jobs, config, &|job, outcome| {
            bar.inc(1);
            bar.set_message(format!("{} {}", job.target_id, outcome.status.as_str()));
            crate::foundation::console::activity(format!(
                "{}/{} sessions; last: {} {}",
                bar.position(),
                bar.length().unwrap_or(0),
                job.target_id,
                outcome.status.as_str()
            ));
            bar.suspend(|| {
                crate::foundation::console::detail(format!(
                    "session {} {} in {:.0} ms",
                    job.target_id,
                    outcome.status.as_str(),
                    outcome.wall_ms
                ))
            });
        });
        bar.finish_and_clear();
        for ((job, _), outcome) in jobs.iter().zip(&outcomes) {
            timings::worker(&job.target_id, worker_time(outcome));
            note_recompiled(&job.target_id, outcome);
        }
        crate::foundation::interrupt::check()?;
        if outcomes.iter().any(|o| o.status != super::RunStatus::Ok) {
            check_room(&self.work.path)?;
            if let Some(tensors) = &self.work.tensors {
                check_room(tensors.path())?;
            }
        }
        Ok(outcomes)
    }
}

/// One line on stderr for a session whose cached compiled context was not usable (it was
/// compiled again; the report records it too).
fn note_recompiled(target_id: &str, outcome: &Outcome) {
    if let Some(r) = outcome
        .result
        .as_ref()
        .filter(|r| r.context == Some(super::job::ContextUse::Recompiled))
    {
        crate::foundation::console::note(format!(
            "{target_id}: the cached QNN context was not used ({}); compiled afresh and stored again",
            r.context_note.as_deref().unwrap_or("no reason recorded")
        ));
    }
}

/// After a session failed: whether the work directory's disk is full. Then every failure of the
/// batch is the machine's, not a finding about the targets, and the audit stops (exit 4).
fn check_room(work: &Path) -> Result<()> {
    let probe = work.join(".room-probe");
    let written = std::fs::write(&probe, vec![0u8; 64 * 1024]);
    let _ = std::fs::remove_file(&probe);
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => Err(run_error(format!(
            "no space left on the disk of the work directory {} (TMPDIR={}): the sessions could not write their outputs; free space there or set TMPDIR to a larger disk",
            work.display(),
            std::env::temp_dir().display()
        ))),
        _ => Ok(()),
    }
}

/// Intra-op threads of a session unless `--threads` says otherwise. Fixed, so that two machines
/// running the same audit print the same figures: an LSTM on the CPU EP gives other bits with 1
/// and 2 threads.
pub const DEFAULT_INTRA_OP_THREADS: usize = 1;

/// Intra-op threads of every golden run, whatever `--threads` says: the reference must not
/// depend on the machine or on the audit's settings.
pub const GOLDEN_INTRA_OP_THREADS: usize = 1;

/// Workers at once for a batch of `job_count` jobs: as many as cores by default (how many run at
/// once changes no figure), fewer when workers of a model of `model_bytes` would not fit in the
/// memory available together (see [`worker_memory`]); always at least one.
pub fn pool_config(exec: &ExecOptions, job_count: usize, model_bytes: u64) -> PoolConfig {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let wanted = exec.jobs.unwrap_or(cores).clamp(1, job_count.max(1));
    let mut max_parallel = wanted;
    if let Some(available) = available_memory() {
        max_parallel = workers_that_fit(wanted, available, model_bytes);
        if max_parallel < wanted {
            crate::foundation::console::detail(format!(
                "{max_parallel} worker(s) at once instead of {wanted}: each may need {:.1} GiB for a model of {:.1} GiB, {:.1} GiB available",
                worker_memory(model_bytes) as f64 / GIB,
                model_bytes as f64 / GIB,
                available as f64 / GIB
            ));
        }
    }
    PoolConfig {
        max_parallel,
        timeout: exec.timeout,
    }
}

/// At most `wanted` workers, no more than `available` bytes hold for a model of `model_bytes`,
/// and always one.
fn workers_that_fit(wanted: usize, available: u64, model_bytes: u64) -> usize {
    let fit = (available / worker_memory(model_bytes)).max(1);
    wanted.min(usize::try_from(fit).unwrap_or(usize::MAX))
}

const GIB: f64 = (1u64 << 30) as f64;

/// What one worker of a model of `model_bytes` may hold at its peak: the model's weights, each
/// integer weight dequantized to float beside them (4 bytes per int8 code: the golden run and
/// sessions without graph optimizations compute every weight's DequantizeLinear output, and ONNX
/// Runtime may schedule them all before the first MatMul), and the runtime itself. Measured on a
/// generated int8 MatMul stack: 5.2x the weights for those sessions, 1.1x for the optimized CPU
/// EP, which keeps the codes.
fn worker_memory(model_bytes: u64) -> u64 {
    const RUNTIME: u64 = 256 << 20;
    model_bytes
        .saturating_mul(5)
        .saturating_add(model_bytes / 4)
        .saturating_add(RUNTIME)
}

/// Memory the system can give new processes without swapping (`MemAvailable`), if it says.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A target id as a file name (`qnn:sm8650` -> `qnn_sm8650`).
pub fn sanitize(id: &str) -> String {
    let name: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // File names have a length limit (255 bytes on most file systems): a long id keeps its first
    // characters and a digest of the whole, so two long ids never share a name.
    if name.len() <= MAX_NAME {
        return name;
    }
    let digest = crate::foundation::hash::sha256_hex(id.as_bytes());
    format!("{}-{}", &name[..MAX_NAME - 13], &digest[..12])
}

/// The longest name [`sanitize`] makes (room left for a suffix such as `.stopped.json`).
const MAX_NAME: usize = 96;

/// The model file workers load: the original, or a copy with its dynamic input dimensions
/// pinned to the shapes being fed (and a rewritten model, such as a derived reference, always).
pub fn model_for_workers(
    model: &LoadedModel,
    inputs: &InputSet,
    dir: &Path,
    name: &str,
    notes: &mut Vec<String>,
) -> Result<PathBuf> {
    let shapes = inputs.shapes();
    let has_dynamic_inputs = model.signature_has_dynamic_inputs();
    if !has_dynamic_inputs && !model.modified {
        return Ok(model.path.clone());
    }
    let mut proto = model.proto.clone();
    let count = pin_input_shapes(&mut proto, &shapes);
    let dest = dir.join(name);
    write_model(&proto, model, &dest)?;
    if count > 0 {
        notes.push(format!(
            "{}: {count} dynamic input dimension(s) pinned to the shapes fed, in a copy of the model (static shapes for every backend)",
            model.path.display()
        ));
    }
    Ok(dest)
}

/// The golden run's job: the reference model on the CPU EP with graph optimizations off and one
/// intra-op thread, so its results do not depend on the machine's core count.
pub fn reference_job(
    cpu: &Runtime,
    model: PathBuf,
    samples: &[Vec<InputFile>],
    dir: &Path,
    free_dims: &[(String, i64)],
) -> (Job, PathBuf) {
    let job = Job {
        target_id: "golden".into(),
        ort_library: cpu.library.clone(),
        ep: EpSetup::Cpu { options: vec![] },
        opt: OptLevel::Disable,
        model,
        samples: samples.to_vec(),
        output_dir: dir.join("out"),
        intra_threads: GOLDEN_INTRA_OP_THREADS,
        free_dims: free_dims.to_vec(),
        session_config: vec![],
        inspect_placement: false,
        compile_only: false,
        repeat: 1,
        feedback: Vec::new(),
        delta_root: None,
        environment: Vec::new(),
        scope: ModelScope::Whole,
        emulated: None,
    };
    (job, dir.to_path_buf())
}

/// Every input of `job` that is a delta file (a growing stream state another worker wrote as what
/// each step added, such as the golden run's fed to a teacher-forced target) written whole in
/// `dir`, for a worker that reads only whole `.npy` files.
fn whole_inputs(job: &mut Job, dir: &Path) -> Result<()> {
    for (k, sample) in job.samples.iter_mut().enumerate() {
        for (i, input) in sample.iter_mut().enumerate() {
            if crate::data::tensor::delta::is_delta(&input.path) {
                std::fs::create_dir_all(dir)?;
                let whole = dir.join(format!("s{k}_i{i}.npy"));
                crate::data::tensor::Tensor::read_npy(&input.path)?.write_npy(&whole)?;
                input.path = whole;
            }
        }
    }
    Ok(())
}

/// One target's job, or `None` when its runtime is unavailable. Placement is inspected in
/// detail (verbose log, partitioned graph) by the caller's choice, and never for CPU targets.
/// `model` is a model audited whole or a temporary part of one (`scope`: only the first stores
/// its compiled QNN context).
pub fn target_job(
    index: usize,
    t: &PlannedTarget,
    (model, scope): (&Path, ModelScope),
    samples: &[Vec<InputFile>],
    work: &Path,
    threads: usize,
    free_dims: &[(String, i64)],
) -> Option<(Job, PathBuf)> {
    let rt = t.runtime.as_ref().ok()?;
    let dir = work.join("targets").join(format!("{index}-{}", sanitize(&t.spec.id)));
    let job = Job {
        target_id: t.spec.id.clone(),
        ort_library: rt.host.library.clone(),
        ep: ep_setup(&t.spec, rt),
        opt: t.spec.opt,
        model: model.to_path_buf(),
        samples: samples.to_vec(),
        output_dir: dir.join("out"),
        intra_threads: threads,
        free_dims: free_dims.to_vec(),
        session_config: t
            .spec
            .options
            .iter()
            .filter(|(k, _)| k.starts_with("session."))
            .cloned()
            .collect(),
        inspect_placement: false,
        compile_only: false,
        repeat: 1,
        feedback: Vec::new(),
        delta_root: None,
        environment: t.spec.environment(),
        scope,
        emulated: match (&rt.emulation, &t.spec.backend) {
            (Some(e), Backend::Arm64 { core }) => {
                // The job carries qemu's `-cpu` value: a core may be a model with features off.
                let qemu_cpu = crate::data::target::arm_core(core).map_or(*core, |c| c.qemu_cpu);
                Some((e.clone(), qemu_cpu.to_string()))
            }
            _ => None,
        },
    };
    Some((job, dir))
}

/// How the worker attaches a target's EP, with the options the catalogue implies (QNN chipset)
/// and the user's.
pub fn ep_setup(spec: &TargetSpec, rt: &TargetRuntime) -> EpSetup {
    let mut options = spec.ep_options();
    let ep_name = spec.backend.ep_name().to_string();
    match &spec.backend {
        Backend::Cpu | Backend::Arm64 { .. } => EpSetup::Cpu { options },
        Backend::Qnn(_) => {
            let library = rt.plugin.as_ref().map(|p| p.library.clone()).unwrap_or_default();
            if !options.iter().any(|(k, _)| k == "backend_path") {
                let backend = library
                    .parent()
                    .map(|d| d.join(catalog::qnn_htp_backend_name()))
                    .unwrap_or_default();
                options.insert(0, ("backend_path".into(), backend.to_string_lossy().to_string()));
            }
            EpSetup::Plugin {
                ep_name,
                library,
                options,
                release: release_text(rt),
                context_cache: None,
            }
        }
        Backend::OpenVino { .. } | Backend::DirectMl | Backend::Cuda | Backend::TensorRt => {
            EpSetup::BuiltIn { ep_name, options }
        }
    }
}

/// The releases a plugin target runs on, in words: package, version and library hash (else the
/// library's path, size and modification time) of the plugin and of its core.
fn release_text(rt: &TargetRuntime) -> String {
    let one = |r: &Runtime| {
        let identity = r.sha256.clone().unwrap_or_else(|| {
            let stamp = std::fs::metadata(&r.library)
                .ok()
                .map(|m| (m.len(), m.modified().ok()))
                .map_or_else(String::new, |(len, t)| format!(" {len} bytes {t:?}"));
            format!("{}{stamp}", r.library.display())
        });
        format!(
            "{} {} {identity}",
            r.package,
            r.version.as_deref().unwrap_or("(version unknown)")
        )
    };
    std::iter::once(&rt.host)
        .chain(&rt.plugin)
        .map(one)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The CPU build, which every golden run needs.
pub fn cpu_runtime(provisioner: &Provisioner) -> Result<Runtime> {
    let build = Build::get("cpu").context("no cpu build in the catalogue")?;
    provisioner.get(build).map_err(|e| {
        runtime_unavailable(format!(
            "the golden run needs {}: {}",
            build.label(),
            crate::foundation::error::one_line(&e)
        ))
    })
}

/// What a worker said of its own time, and its wall time as the parent saw it.
fn worker_time(outcome: &Outcome) -> timings::WorkerTime {
    let mut t = timings::WorkerTime {
        wall: outcome.wall_ms,
        ..Default::default()
    };
    if let Some(r) = &outcome.result {
        t.load = r.load_ms;
        t.register = r.register_ms;
        t.session_create = r.session_create_ms;
        t.run = r.run_ms.iter().sum();
        t.io = r.io_ms;
        t.peak_rss_mb = r.peak_rss_mb;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn workers_of_a_large_model_run_as_many_as_memory_holds() {
        // Measured on the 2.5 GiB int8 stack: the golden run and cpu:noopt peak at 12.9 GiB each,
        // so two at once do not fit in 22 GiB; a 1 GiB model's peak at 5.2 GiB, four fit.
        let large = 5 * GIB / 2;
        assert!(worker_memory(large) >= 13 * GIB && worker_memory(large) < 14 * GIB);
        assert_eq!(workers_that_fit(2, 22 * GIB, large), 1);
        assert_eq!(workers_that_fit(8, 22 * GIB, GIB), 4);
        assert_eq!(workers_that_fit(2, 22 * GIB, GIB), 2);
        // A model larger than the machine still runs, one worker at a time.
        assert_eq!(workers_that_fit(2, GIB, 40 * GIB), 1);
        // Small models are never held back.
        assert_eq!(workers_that_fit(2, 2 * GIB, 10 << 20), 2);
    }
}
