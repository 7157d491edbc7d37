//! Setting up and running the worker processes of one audit: the work directory, the model file
//! they load, one job per target plus the golden run, parallelism and progress.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::files::sanitize;
use super::plan::PlannedTarget;
use super::ExecOptions;
use crate::error::environment;
use crate::inputs::InputSet;
use crate::model::rewrite::{pin_input_shapes, write_model};
use crate::model::LoadedModel;
use crate::runtime::{ep_setup, Build, Provisioner, Runtime};
use crate::target::OptLevel;
use crate::worker::{run_all, EpSetup, InputFile, Job, Outcome, PoolConfig};

/// The work directory of one audit; removed at the end unless asked to keep it.
pub struct WorkDir {
    dir: Option<tempfile::TempDir>,
    pub path: PathBuf,
}

impl WorkDir {
    /// Creates it in the system temporary directory.
    pub fn new(keep: bool) -> Result<WorkDir> {
        let dir = tempfile::Builder::new()
            .prefix("npu-audit-")
            .tempdir()
            .map_err(|e| environment(format!("cannot create a work directory: {e}")))?;
        let path = dir.path().to_path_buf();
        if keep {
            eprintln!("npu-audit: keeping the work directory {}", path.display());
            Ok(WorkDir {
                path: dir.keep(),
                dir: None,
            })
        } else {
            crate::interrupt::dir_created(&path);
            Ok(WorkDir { dir: Some(dir), path })
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Some(d) = self.dir.take() {
            let _ = d.close();
            crate::interrupt::dir_released(&self.path);
        }
    }
}

/// Workers at once and intra-op threads per worker: by default as many workers as cores, and
/// the cores shared among them.
pub fn pool_config(exec: &ExecOptions, job_count: usize) -> (PoolConfig, usize) {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let parallel = exec.jobs.unwrap_or(cores).clamp(1, job_count.max(1));
    let threads = exec.threads.unwrap_or((cores / parallel).max(1));
    (
        PoolConfig {
            max_parallel: parallel,
            timeout: exec.timeout,
        },
        threads,
    )
}

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
        intra_threads: 1,
        free_dims: free_dims.to_vec(),
        session_config: vec![],
        inspect_placement: false,
        compile_only: false,
        repeat: 1,
    };
    (job, dir.to_path_buf())
}

/// One target's job, or `None` when its runtime is unavailable. Placement is inspected in
/// detail (verbose log, partitioned graph) by the caller's choice, and never for CPU targets.
pub fn target_job(
    index: usize,
    t: &PlannedTarget,
    model: &Path,
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
    };
    Some((job, dir))
}

/// The CPU build, which every golden run needs.
pub fn cpu_runtime(provisioner: &Provisioner) -> Result<Runtime> {
    let build = Build::get("cpu").context("no cpu build in the catalogue")?;
    provisioner.get(build).map_err(|e| {
        environment(format!(
            "the golden run needs {}: {}",
            build.label(),
            crate::error::one_line(&e)
        ))
    })
}

/// Runs the jobs with a progress line on stderr (drawn only on a terminal).
pub fn run_with_progress(jobs: &[(Job, PathBuf)], config: PoolConfig) -> Result<Vec<Outcome>> {
    let bar = ProgressBar::with_draw_target(Some(jobs.len() as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos}/{len} sessions  {msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    let outcomes = run_all(jobs, config, &|job, outcome| {
        bar.inc(1);
        bar.set_message(format!("{} {}", job.target_id, outcome.status.as_str()));
    });
    bar.finish_and_clear();
    crate::interrupt::check()?;
    Ok(outcomes)
}
