//! `npu-audit plan`: the command after `--` parsed as the tool parses it, its work weighed (eval:
//! every run's samples at each run's cost per sample; compare: its targets) and split into N
//! shards of even cost, and the jobs printed in the form the chosen engine takes.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use clap::FromArgMatches;

use super::args::{Cli, Command, CompareArgs, EvalArgs, PlanArgs, PlanFormat};
use crate::commands::shard::jobs::{compare_jobs, eval_jobs, JobPlan};
use crate::commands::shard::resources::{Layout, Overrides, Workload};
use crate::data::target::{distinct, TargetList};
use crate::execution::exec::selection::Requested;
use crate::foundation::error::{bad_flag, bad_report, ExitCode};

/// The most shards a plan makes.
const MAX_SHARDS: u64 = crate::commands::shard::MAX_SHARDS as u64;

/// The most jobs GitHub Actions runs from one matrix.
const GITHUB_MAX_JOBS: usize = 256;

/// How the work is split and sized: the measured times per sample, the number of jobs, the
/// resources the user set.
#[derive(Clone, Copy)]
struct Split<'a> {
    measured: Option<&'a BTreeMap<String, f64>>,
    count: usize,
    given: Overrides,
}

/// The command a plan splits.
enum Planned {
    Eval(Box<EvalArgs>),
    Compare(Box<CompareArgs>),
}

/// Runs `plan`: parses the command, splits it, prints the jobs.
pub fn run(a: PlanArgs) -> Result<ExitCode> {
    let PlanArgs {
        shards,
        format,
        costs_from,
        cpus,
        mem,
        time,
        command,
    } = a;
    let given = Overrides {
        cpus,
        mem_mib: mem,
        seconds: time,
    };
    if shards == 0 || shards > MAX_SHARDS {
        return Err(bad_flag(format!(
            "--shards {shards}: give a number of jobs from 1 to {MAX_SHARDS}"
        )));
    }
    let count = shards as usize;
    if format == PlanFormat::Github && count > GITHUB_MAX_JOBS {
        return Err(bad_flag(format!(
            "--shards {count} --format github: GitHub Actions runs at most {GITHUB_MAX_JOBS} jobs of a matrix"
        )));
    }
    let measured = costs_from.as_deref().map(measured_costs).transpose()?;
    let split = Split {
        measured: measured.as_ref(),
        count,
        given,
    };
    let plan = match parse_command(&command)? {
        Planned::Eval(e) => eval_plan(command.clone(), &e, split)?,
        Planned::Compare(c) => compare_plan(command.clone(), &c, split)?,
    };
    let text = match format {
        PlanFormat::Table => crate::render::jobs::table(&plan),
        PlanFormat::Json => crate::render::jobs::matrix_json(&plan),
        PlanFormat::Github => crate::render::jobs::github(&plan),
        PlanFormat::Slurm => crate::render::jobs::slurm(&plan),
        PlanFormat::K8s => crate::render::jobs::k8s(&plan),
    };
    super::shared::print_stdout(&text)?;
    Ok(ExitCode::Success)
}

/// clap's error as one line, without its usage block.
fn clap_line(e: &clap::Error) -> String {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        return "it asks for help or the version, not for work".into();
    }
    let text = e.render().to_string();
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join(" ").trim_start_matches("error: ").to_string()
}

/// The command after `--`, parsed as `npu-audit` parses its command line; only `eval` and
/// `compare` split, and the flags every job gets (`--shard`, `--out`, `--costs`) must be left out.
fn parse_command(words: &[String]) -> Result<Planned> {
    // A word is handed to a shell, a YAML file and a CI engine: a line break (any of Unicode's)
    // or a control character in it could end a line or a quote there, and a terminal would hide it.
    let unsafe_char = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if words.iter().any(|w| w.chars().any(unsafe_char)) {
        return Err(bad_flag(
            "the command after --: an argument holds a line break or a control character, which no recipe can carry safely",
        ));
    }
    // `--costs` requires `--shard`, so clap would complain about the missing --shard first.
    if words.iter().any(|w| w == "--costs" || w.starts_with("--costs=")) {
        return Err(bad_flag(
            "the command after -- has --costs: plan gives every job its own --shard, --costs and --out; leave it out",
        ));
    }
    let argv = std::iter::once("npu-audit".to_string()).chain(words.iter().cloned());
    let matches = super::help::command()
        .try_get_matches_from(argv)
        .map_err(|e| bad_flag(format!("the command after --: {}", clap_line(&e))))?;
    let name = matches.subcommand_name().unwrap_or_default().to_string();
    if let Some((_, sub)) = matches.subcommand() {
        for flag in ["shard", "out", "costs"] {
            if sub.try_contains_id(flag).unwrap_or(false) {
                return Err(bad_flag(format!(
                    "the command after -- has --{flag}: plan gives every job its own --shard, --costs and --out; leave it out"
                )));
            }
        }
    }
    let cli =
        Cli::from_arg_matches(&matches).map_err(|e| bad_flag(format!("the command after --: {}", clap_line(&e))))?;
    match cli.command {
        Command::Eval(e) if e.until_decided => Err(bad_flag(
            "the command after -- has --until-decided: a sequential eval decides as its samples come in one order, which shards cannot split; run it as one job",
        )),
        Command::Eval(e) => Ok(Planned::Eval(e)),
        Command::Compare(c) => Ok(Planned::Compare(c)),
        _ => Err(bad_flag(format!(
            "the command after -- is `{name}`: plan splits `eval` and `compare`"
        ))),
    }
}

/// Each target's median time per sample in a previous eval's JSON report (`run_ms_median`), read
/// as the typed report.
fn measured_costs(path: &Path) -> Result<BTreeMap<String, f64>> {
    let report = super::eval::read_eval_report("--costs-from", path)?;
    let times: BTreeMap<String, f64> = report
        .targets
        .iter()
        .filter_map(|t| Some((t.id.clone(), t.run_ms_median?)))
        .filter(|(_, ms)| ms.is_finite() && *ms > 0.0)
        .collect();
    if times.is_empty() {
        return Err(bad_report(format!(
            "--costs-from {}: no target with a run_ms_median (an eval's JSON report of targets that ran)",
            path.display()
        )));
    }
    Ok(times)
}

/// The runs of a command: the targets asked for (else the policy's, else every target this
/// machine can run) on their releases, and the baseline unless left out, as the command plans them.
fn requested(asked: &[TargetList], policy: &crate::judge::policy::Policy, baseline: bool) -> Result<Vec<Requested>> {
    let asked = if asked.is_empty() { &policy.targets } else { asked };
    let specs = (!asked.is_empty()).then(|| distinct(asked));
    crate::execution::exec::selection::targets(specs.as_deref(), &policy.allow_failure, baseline, &policy.releases)
}

/// An eval's plan: its runs as `eval` selects them, over the set's samples.
fn eval_plan(args: Vec<String>, e: &EvalArgs, split: Split) -> Result<JobPlan> {
    // Read as `eval` reads them: the limits checked, the set as the flags name it.
    let flags = super::eval::TaskFlags::read(e.task_args.clone())?;
    let policy = super::shared::policy_with(
        e.policy.config.as_deref(),
        e.policy.no_config,
        &flags.thresholds,
        &e.targets.allow_failure,
    )?;
    let runs = requested(&e.targets.targets, &policy, !e.targets.no_baseline)?;
    let named = flags.dataset(e.dataset.clone());
    let set = crate::data::dataset::Dataset::open(&named.path, named.labels.as_deref(), named.limit)?;
    let work = workload(
        Layout::Eval,
        (&e.model, &e.reference),
        &e.exec,
        (&runs, split.measured),
        1,
    )?;
    eval_jobs(
        args,
        &runs,
        (set.len(), split.count),
        split.measured,
        (&work, split.given),
    )
}

/// A compare's plan: its targets as `compare` selects them.
fn compare_plan(args: Vec<String>, c: &CompareArgs, split: Split) -> Result<JobPlan> {
    let policy = super::shared::gate_policy(&c.gate, &c.targets.allow_failure)?;
    let runs = requested(&c.targets.targets, &policy, !c.targets.no_baseline)?;
    let work = workload(
        Layout::Compare,
        (&c.model, &c.reference),
        &c.exec,
        (&runs, split.measured),
        compare_runs_per_sample(c),
    )?;
    compare_jobs(args, &runs, split.count, split.measured, (&work, split.given))
}

/// How many times a compare runs each target's model: its samples (one per `--npz` file, one for
/// `--npy`, else `--samples`) times `--steps` of a stream, once more per `--repeat` and once with
/// the thread probe that a repeat adds.
fn compare_runs_per_sample(c: &CompareArgs) -> u64 {
    let samples = match (c.inputs.npz.len(), c.inputs.npy.is_empty()) {
        (0, true) => c.inputs.samples,
        (0, false) => 1,
        (n, _) => n as u64,
    };
    let repeats = if c.targets.repeat > 1 { c.targets.repeat + 1 } else { 1 };
    samples * c.stream.steps.unwrap_or(1) * repeats
}

/// What the jobs run, for sizing them: the model's and the golden run's bytes (a stored golden
/// run runs no model; without `--reference` the float reference is derived from the model with
/// its weights, about its size), the threads and `--jobs` of the command, each run's backend.
fn workload(
    layout: Layout,
    (model, reference): (&Path, &super::args::ReferenceArgs),
    exec: &super::args::ExecArgs,
    (runs, measured): (&[Requested], Option<&BTreeMap<String, f64>>),
    runs_per_sample: u64,
) -> Result<Workload> {
    let bytes = |path: &Path| crate::data::model::load_model(path).map(|m| m.total_bytes());
    let model_bytes = bytes(model)?;
    let reference_bytes = match (&reference.golden_dir, &reference.reference) {
        (Some(_), _) => None,
        (None, Some(path)) => Some(bytes(path)?),
        (None, None) => Some(model_bytes),
    };
    Ok(Workload {
        layout,
        model_bytes,
        reference_bytes,
        threads: exec
            .threads
            .unwrap_or(crate::execution::exec::executor::DEFAULT_INTRA_OP_THREADS),
        jobs: exec.jobs,
        runs_per_sample,
        backends: runs
            .iter()
            .map(|r| (r.spec.id.clone(), r.spec.backend.clone()))
            .collect(),
        measured_ms: measured.cloned().unwrap_or_default(),
    })
}
