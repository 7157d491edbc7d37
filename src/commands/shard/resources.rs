//! What each job of a split asks its cluster engine for: CPUs, memory and a time limit. A cluster
//! that is not told runs a job on its defaults (often one CPU and a little memory, and the
//! partition's longest time), where a QNN shard is killed or starves; so `plan` estimates them
//! from what a shard runs at once (its windows, [`super::windows`]), the backends' measured needs
//! and the split's costs, and every recipe carries them. docs/scale.md ("Resources") states the
//! rules and the measurements they come from.

use std::collections::BTreeMap;

use super::{windows, Unit};
use crate::data::target::Backend;
use crate::execution::exec::executor::GOLDEN_INTRA_OP_THREADS;

/// What every job of one split asks for: the costliest shard's needs (one array, one set of
/// limits), or what the user gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// CPUs the job's processes keep busy at once.
    pub cpus: u32,
    /// Memory, MiB: the peak of the job's processes together (what a memory cgroup counts).
    pub mem_mib: u64,
    /// Wall-clock limit, seconds.
    pub seconds: u64,
}

/// `plan --cpus`, `--mem`, `--time`: the figures the user sets instead of the estimates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--cpus N`.
    pub cpus: Option<u32>,
    /// `--mem SIZE`, in MiB.
    pub mem_mib: Option<u64>,
    /// `--time TIME`, in seconds.
    pub seconds: Option<u64>,
}

/// How a job runs its processes: `eval` streams each window's runs side by side, every run in
/// one session or more; `compare` runs its golden run and targets as one batch of workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Windows of units one after the other, each run's sessions side by side in a window.
    Eval,
    /// One batch of workers: the golden run and every target.
    Compare,
}

/// What the jobs of a split run, as far as sizing them goes; built by `plan` from the command.
#[derive(Debug, Clone)]
pub struct Workload {
    /// How the command runs its workers.
    pub layout: Layout,
    /// Bytes of the audited model: its file and external data.
    pub model_bytes: u64,
    /// Bytes of the model the golden run executes (`--reference`, else the model itself, from
    /// which the float reference is derived with its weights kept); `None`: a stored golden run
    /// (`--golden DIR`), which runs no process.
    pub reference_bytes: Option<u64>,
    /// Intra-op threads of every target's session (`--threads`, else the default 1).
    pub threads: usize,
    /// `--jobs` as the command gives it.
    pub jobs: Option<usize>,
    /// Model runs per sample of a unit: 1 for eval; compare's samples x steps x its runs of each.
    pub runs_per_sample: u64,
    /// Every run's backend, by target id.
    pub backends: BTreeMap<String, Backend>,
    /// Median milliseconds per sample measured by an earlier eval (`--costs-from`), by target id.
    pub measured_ms: BTreeMap<String, f64>,
}

/// Setup every job gets on top of its samples, seconds: provisioning the runtimes on first use
/// (the CPU build's wheel, the QNN build's ~90 MB, OpenVINO's, the ARM64 emulation's qemu, Python
/// and aarch64 wheel), reading the models and the set, creating the sessions and compiling QNN
/// contexts (1-2 s per chipset for the 1 MB classifier, tens of seconds for a 100 MB model).
pub const SETUP_SECONDS: u64 = 300;

/// The estimate of a shard's samples is multiplied by this: medians measured on another machine,
/// or a busier one, run up to twice as long (docs/scale.md: the same QNN run took 0.9 to 2.9 s
/// per sample on one machine as its load changed).
pub const SAFETY: f64 = 2.0;

/// Memory headroom over the sum of the processes' estimates (records and samples in flight,
/// shared-memory tensors, the allocator's slack).
pub const HEADROOM: f64 = 1.25;

/// The estimated memory is rounded up to a multiple of this (MiB).
pub const MEM_STEP_MIB: u64 = 256;

/// The process that coordinates a job (reads the set, writes the jobs, reduces every answer):
/// MiB at rest, and per MiB of the models it holds (the model and the reference, parsed and
/// rewritten for the workers). Measured: 42 MiB with the 1.3 MiB classifier pair, 175 MiB with
/// 80 MiB of models, 910 MiB with 480 MiB.
const COORDINATOR: (f64, f64) = (64.0, 2.0);

/// The golden run's worker (the CPU EP, graph optimizations off, the float reference): MiB at
/// rest and per MiB of its model. Measured: 58 MiB with the 0.6 MiB classifier, 142 MiB with a
/// 64 MiB model, 582 MiB with 384 MiB.
const GOLDEN: (f64, f64) = (64.0, 1.5);

/// What one worker needs on its backend: MiB at rest, MiB per MiB of its model, CPUs it keeps
/// busy at one intra-op thread, and the default milliseconds per sample when nothing was
/// measured. Measured on a 2-core x86-64 machine (docs/scale.md, "Resources"); times for a small
/// model (the 0.7 MiB PP-OCR classifier): time follows a model's arithmetic, not its size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// MiB of a worker with a model of no size: the runtime, its libraries, the interpreter.
    pub base_mib: f64,
    /// MiB per MiB of the worker's model.
    pub per_model_mib: f64,
    /// CPUs one worker keeps busy at one intra-op thread.
    pub cpus: u32,
    /// Milliseconds per sample when nothing was measured (a small model's).
    pub ms_per_sample: f64,
}

/// The profile of a backend's worker.
pub fn profile(backend: &Backend) -> Profile {
    let p = |base_mib, per_model_mib, cpus, ms_per_sample| Profile {
        base_mib,
        per_model_mib,
        cpus,
        ms_per_sample,
    };
    match backend {
        // 55-62 MiB + 1.3-2.0x the model; 2.5-6 ms a sample.
        Backend::Cpu => p(64.0, 2.0, 1, 5.0),
        // 165-187 MiB + 3.1x; 4.5-12 ms.
        Backend::OpenVino { .. } => p(192.0, 3.0, 1, 10.0),
        // qemu, Python and the aarch64 build: 175-189 MiB + 2.0x; 57-290 ms.
        Backend::Arm64 { .. } => p(192.0, 2.0, 1, 300.0),
        // The HTP simulator: 187-250 MiB + 5.6x (compiling the context); it runs threads of its
        // own (1.85 of 2 cores busy; 1.4 s a sample on one core, 0.9 s on two).
        Backend::Qnn(_) => p(256.0, 6.0, 2, 2000.0),
        // The host side of a GPU session, as the CPU EP's; not measured here (no GPU).
        Backend::DirectMl | Backend::Cuda | Backend::TensorRt => p(64.0, 2.0, 1, 5.0),
    }
}

/// Sessions each run of an eval window gets: `--jobs` shared by the runs, else the cores the job
/// sees shared by the threads one session of every run keeps busy (`set_threads`); at least one.
/// `eval` starts its sessions so, and `plan` sizes its jobs with the same rule.
pub fn sessions_per_run(jobs: Option<usize>, cores: usize, runs: usize, set_threads: usize) -> usize {
    match jobs {
        Some(j) => (j / runs.max(1)).max(1),
        None => (cores / set_threads.max(1)).max(1),
    }
}

/// A job's request and each shard's expected work.
#[derive(Debug, Clone)]
pub struct Sizing {
    /// What every job asks for.
    pub request: Resources,
    /// Each shard's expected seconds of samples (before setup and the safety factor).
    pub shard_seconds: Vec<f64>,
    /// Which figures the user gave: cpus, memory, time.
    pub given: (bool, bool, bool),
    /// Where the times per sample come from.
    pub times: TimesFrom,
}

/// Where the times per sample of a split's runs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimesFrom {
    /// Every run's backend default ([`Profile::ms_per_sample`]): nothing measured.
    Defaults,
    /// Every run's measured median (`--costs-from`).
    Measured,
    /// Measured, and a backend's default for the runs the report does not have.
    Mixed,
}

/// One worker: its run (`None`: the golden run), CPUs and MiB.
#[derive(Debug, Clone, Copy)]
struct Worker<'a> {
    run: Option<&'a str>,
    cpus: u32,
    mib: f64,
    threads: usize,
}

const MIB: f64 = (1u64 << 20) as f64;

impl Workload {
    /// The golden run's worker: the CPU EP at one thread, its model.
    fn golden(&self) -> Option<Worker<'static>> {
        let bytes = self.reference_bytes?;
        Some(Worker {
            run: None,
            cpus: GOLDEN_INTRA_OP_THREADS as u32,
            mib: GOLDEN.0 + GOLDEN.1 * bytes as f64 / MIB,
            threads: GOLDEN_INTRA_OP_THREADS,
        })
    }

    /// A target's worker: its backend's profile at the command's threads.
    fn target<'a>(&self, run: &'a str) -> Worker<'a> {
        let p = self.backends.get(run).map_or(profile(&Backend::Cpu), profile);
        let threads = self.threads.max(1);
        Worker {
            run: Some(run),
            cpus: p.cpus.max(threads as u32),
            mib: p.base_mib + p.per_model_mib * self.model_bytes as f64 / MIB,
            threads,
        }
    }

    /// Milliseconds per sample of a run: measured, else its backend's default.
    fn ms(&self, run: &str) -> f64 {
        self.measured_ms.get(run).copied().unwrap_or_else(|| {
            self.backends
                .get(run)
                .map_or(profile(&Backend::Cpu), profile)
                .ms_per_sample
        })
    }

    fn coordinator_mib(&self) -> f64 {
        let models = (self.model_bytes + self.reference_bytes.unwrap_or(0)) as f64 / MIB;
        COORDINATOR.0 + COORDINATOR.1 * models
    }

    /// The workers of one window, one per run (the golden run first).
    fn workers<'a>(&self, members: &[&'a Unit]) -> Vec<Worker<'a>> {
        self.golden()
            .into_iter()
            .chain(members.iter().map(|u| self.target(&u.run)))
            .collect()
    }

    /// How many copies of each worker run at once with `cores` (eval: sessions per run), and how
    /// many workers at once (compare: its batch, the largest first).
    fn at_once(&self, workers: &[Worker], cores: usize) -> (usize, usize) {
        match self.layout {
            Layout::Eval => {
                let set_threads = workers.iter().map(|w| w.threads).sum();
                (
                    sessions_per_run(self.jobs, cores, workers.len(), set_threads),
                    workers.len(),
                )
            }
            Layout::Compare => (1, self.jobs.unwrap_or(cores).clamp(1, workers.len().max(1))),
        }
    }
}

/// The sum of the `n` largest of `values`.
fn largest_sum<T: Copy + PartialOrd + std::iter::Sum<T>>(mut values: Vec<T>, n: usize) -> T {
    values.sort_by(|a, b| b.partial_cmp(a).unwrap_or(std::cmp::Ordering::Equal));
    values.into_iter().take(n).sum()
}

/// The CPUs a window keeps busy at one session per run (eval) or its whole batch (compare), as
/// `--jobs` allows.
fn window_cpus(work: &Workload, workers: &[Worker]) -> u32 {
    let cpus: Vec<u32> = workers.iter().map(|w| w.cpus).collect();
    match (work.layout, work.jobs) {
        (Layout::Eval, Some(j)) => (j / workers.len().max(1)).max(1) as u32 * cpus.iter().sum::<u32>(),
        (Layout::Eval, None) => cpus.iter().sum(),
        (Layout::Compare, j) => largest_sum(cpus, j.unwrap_or(usize::MAX)),
    }
}

/// The peak MiB of a window's processes on `cores`: the coordinator and the workers at once.
fn window_mib(work: &Workload, workers: &[Worker], cores: usize) -> f64 {
    let (copies, count) = work.at_once(workers, cores);
    let mibs: Vec<f64> = workers.iter().map(|w| w.mib).collect();
    work.coordinator_mib() + copies as f64 * largest_sum(mibs, count)
}

/// The expected seconds of a window's samples on `cores`: its slowest run (eval: the runs stream
/// side by side, a run's samples shared by its sessions), or compare's batch spread over the
/// workers at once (never less than its slowest target).
fn window_seconds(work: &Workload, workers: &[Worker], (range, cores): (usize, usize)) -> f64 {
    let (copies, count) = work.at_once(workers, cores);
    let times: Vec<f64> = workers
        .iter()
        .filter_map(|w| w.run)
        .map(|run| range as f64 * work.runs_per_sample as f64 * work.ms(run) / 1000.0)
        .collect();
    let slowest = times.iter().copied().fold(0.0, f64::max);
    match work.layout {
        Layout::Eval => slowest / copies as f64,
        Layout::Compare => slowest.max(times.iter().sum::<f64>() / count as f64),
    }
}

/// Sizes the jobs of a split: each shard's windows, the CPUs the busiest keeps busy, the memory
/// the fullest holds with those CPUs (the sessions a job starts follow the cores it sees), the
/// time of the costliest shard with setup and the safety factor; the user's figures instead where
/// given. One array takes one request: every job gets the largest.
pub fn size(work: &Workload, shards: &[Vec<Unit>], given: Overrides) -> Sizing {
    let windowed: Vec<Vec<(usize, Vec<Worker>)>> = shards
        .iter()
        .map(|units| {
            windows(units)
                .into_iter()
                .map(|(range, members)| (range.len(), work.workers(&members)))
                .collect()
        })
        .collect();
    let all = || windowed.iter().flatten();
    let cpus = given.cpus.unwrap_or_else(|| {
        let busiest = all().map(|(_, w)| window_cpus(work, w)).max().unwrap_or(1);
        busiest.clamp(1, super::limits::MAX_CPUS)
    });
    let cores = cpus as usize;
    let peak = all().map(|(_, w)| window_mib(work, w, cores)).fold(0.0, f64::max);
    let estimated_mib = ((peak * HEADROOM / MEM_STEP_MIB as f64).ceil() as u64).max(1) * MEM_STEP_MIB;
    let shard_seconds: Vec<f64> = windowed
        .iter()
        .map(|s| s.iter().map(|(n, w)| window_seconds(work, w, (*n, cores))).sum())
        .collect();
    let costliest = shard_seconds.iter().copied().fold(0.0, f64::max);
    let minutes = ((SETUP_SECONDS as f64 + SAFETY * costliest) / 60.0).ceil() as u64;
    let measured = work
        .backends
        .keys()
        .filter(|run| work.measured_ms.contains_key(*run))
        .count();
    let times = match measured {
        0 => TimesFrom::Defaults,
        n if n == work.backends.len() => TimesFrom::Measured,
        _ => TimesFrom::Mixed,
    };
    Sizing {
        request: Resources {
            cpus,
            mem_mib: given.mem_mib.unwrap_or(estimated_mib),
            seconds: given
                .seconds
                .unwrap_or(minutes.min(super::limits::MAX_SECONDS / 60) * 60),
        },
        shard_seconds,
        given: (given.cpus.is_some(), given.mem_mib.is_some(), given.seconds.is_some()),
        times,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::target::TargetSpec;

    const MB: u64 = 1 << 20;

    fn unit(run: &str, start: usize, end: usize) -> Unit {
        Unit {
            run: run.into(),
            start,
            end,
        }
    }

    /// A 1 MiB model and a 1 MiB reference on cpu, qnn:sm8650 and the baseline.
    fn work(layout: Layout) -> Workload {
        let backends = ["cpu", "qnn:sm8650", "cpu:noopt"]
            .into_iter()
            .map(|id| (id.to_string(), TargetSpec::parse_many(id).unwrap().remove(0).backend))
            .collect();
        Workload {
            layout,
            model_bytes: MB,
            reference_bytes: Some(MB),
            threads: 1,
            jobs: None,
            runs_per_sample: 1,
            backends,
            measured_ms: BTreeMap::new(),
        }
    }

    #[test]
    fn an_eval_job_asks_for_its_busiest_window_and_its_costliest_shard() {
        // Shard 1 streams cpu and qnn over samples 0..10 in one window, shard 2 the baseline.
        let shards = vec![
            vec![unit("cpu", 0, 10), unit("qnn:sm8650", 0, 10)],
            vec![unit("cpu:noopt", 0, 10)],
        ];
        let s = size(&work(Layout::Eval), &shards, Overrides::default());
        // CPUs: the golden run 1 + cpu 1 + the simulator 2.
        assert_eq!(s.request.cpus, 4);
        // MiB: coordinator 64 + 2 x 2, golden 64 + 1.5, cpu 64 + 2, qnn 256 + 6 x 1 = 461.5;
        // x 1.25 = 576.9, up to a multiple of 256.
        assert_eq!(s.request.mem_mib, 768);
        // qnn's 10 samples at 2 s: 20 s; 300 s setup + 2 x 20 s = 340 s, whole minutes: 6.
        assert_eq!(s.shard_seconds[0], 20.0);
        // Shard 2's window keeps 2 of the 4 CPUs busy at one session per run: it gets 2 sessions,
        // its 10 samples of 5 ms take 25 ms.
        assert!((s.shard_seconds[1] - 0.025).abs() < 1e-9);
        assert_eq!(s.request.seconds, 360);
        assert_eq!(s.times, TimesFrom::Defaults);
        // --jobs 6 over 3 runs: 2 sessions each, twice the workers, half the time.
        let mut two = work(Layout::Eval);
        two.jobs = Some(6);
        let s = size(&two, &shards, Overrides::default());
        assert_eq!(s.request.cpus, 8);
        // 68 + 2 x (65.5 + 66 + 262) = 855; x 1.25 = 1068.75 -> 1280.
        assert_eq!(s.request.mem_mib, 1280);
        assert_eq!(s.shard_seconds[0], 10.0);
        // Measured medians replace the defaults where the report has them.
        let mut measured = work(Layout::Eval);
        measured.measured_ms.insert("qnn:sm8650".into(), 500.0);
        let s = size(&measured, &shards, Overrides::default());
        assert_eq!((s.shard_seconds[0], s.times), (5.0, TimesFrom::Mixed));
    }

    #[test]
    fn sessions_share_jobs_by_runs_and_cores_by_threads() {
        // --jobs: sessions shared by the runs, whatever the threads.
        assert_eq!(sessions_per_run(Some(6), 64, 3, 12), 2);
        assert_eq!(sessions_per_run(Some(2), 64, 3, 3), 1);
        // Cores: as many sets of one session per run as their threads fit.
        assert_eq!(sessions_per_run(None, 8, 2, 2), 4);
        assert_eq!(sessions_per_run(None, 8, 2, 1 + 4), 1);
        assert_eq!(sessions_per_run(None, 1, 3, 3), 1);
    }

    #[test]
    fn a_compare_job_runs_its_batch_at_once_unless_jobs_bounds_it() {
        let shards = vec![vec![
            unit("cpu", 0, 1),
            unit("qnn:sm8650", 0, 1),
            unit("cpu:noopt", 0, 1),
        ]];
        let mut w = work(Layout::Compare);
        w.runs_per_sample = 3;
        let s = size(&w, &shards, Overrides::default());
        // golden 1 + cpu 1 + qnn 2 + noopt 1; all four workers at once: 68 + 65.5 + 66 + 262 +
        // 66 = 527.5, x 1.25 = 659.4 -> 768; qnn's 3 runs at 2 s.
        assert_eq!((s.request.cpus, s.request.mem_mib), (5, 768));
        assert!((s.shard_seconds[0] - 6.0).abs() < 1e-9);
        w.jobs = Some(1);
        let s = size(&w, &shards, Overrides::default());
        // One worker at a time: the simulator's 2 CPUs, its 262 MiB beside the coordinator's 68
        // (x 1.25 = 412.5 -> 512), every target's runs one after the other (6 s + 2 x 15 ms).
        assert_eq!((s.request.cpus, s.request.mem_mib), (2, 512));
        assert!((s.shard_seconds[0] - 6.03).abs() < 1e-9);
    }

    #[test]
    fn the_users_figures_win_and_a_stored_golden_run_runs_no_worker() {
        let shards = vec![vec![unit("cpu", 0, 10), unit("qnn:sm8650", 0, 10)]];
        let given = Overrides {
            cpus: Some(16),
            mem_mib: Some(4096),
            seconds: Some(90),
        };
        let s = size(&work(Layout::Eval), &shards, given);
        assert_eq!(
            s.request,
            Resources {
                cpus: 16,
                mem_mib: 4096,
                seconds: 90
            }
        );
        assert_eq!(s.given, (true, true, true));
        // With 16 CPUs the eval would start 16 / 3 = 5 sessions per run: the memory follows.
        let s = size(
            &work(Layout::Eval),
            &shards,
            Overrides {
                cpus: Some(16),
                ..Overrides::default()
            },
        );
        // 68 + 5 x (65.5 + 66 + 262) = 2035.5; x 1.25 = 2544.4 -> 2560.
        assert_eq!(s.request.mem_mib, 2560);
        let mut stored = work(Layout::Eval);
        stored.reference_bytes = None;
        let s = size(&stored, &shards, Overrides::default());
        // cpu 1 + qnn 2; 66 + 66 + 262 = 394 (coordinator 64 + 2 x 1), x 1.25 -> 512.
        assert_eq!((s.request.cpus, s.request.mem_mib), (3, 512));
    }
}
