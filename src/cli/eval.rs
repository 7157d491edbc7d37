//! `npu-audit eval`: the flags turned once into the eval's options (the task read from its files,
//! the limits into the policy), the eval run, its table, JSON, Markdown and HTML.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::args::{
    AccuracyLimitArgs, EvalArgs, FindingsReportArgs, PolicyFileArgs, ReportFormat, SetArgs, SetTargetArgs, StatArgs,
    TaskArgs, TaskChoice,
};
use super::shared::{
    accuracy_thresholds, emit_findings, exec_options, findings_files, findings_outputs, golden_source, policy_with,
    FindingsFile, Forms,
};
use crate::analyses::accuracy::task::TaskSpec;
use crate::analyses::accuracy::StatOptions;
use crate::commands::eval::{DatasetOptions, EvalOptions, Records};
use crate::commands::shard::ShardFlag;
use crate::data::target::distinct;
use crate::foundation::error::{bad_flag, ExitCode};
use crate::foundation::userfile::Outputs;
use crate::judge::policy::Thresholds;
use crate::report::eval::EvalReport;

/// `eval` as asked: its options, the files it writes and how it prints.
struct EvalCommand {
    options: EvalOptions,
    files: Vec<FindingsFile<EvalReport>>,
    format: ReportFormat,
}

/// A small text file the task reads (`--classes`, `--vocab`).
fn read_text(flag: &str, path: &Path) -> Result<String> {
    crate::foundation::userfile::regular_file(path).map_err(|e| bad_flag(format!("{flag} {}: {e}", path.display())))?;
    let bytes = crate::foundation::userfile::read_user_file(path)
        .map_err(|e| bad_flag(format!("{flag} {}: {e}", path.display())))?;
    String::from_utf8(bytes).map_err(|_| bad_flag(format!("{flag} {}: not UTF-8 text", path.display())))
}

/// What the task flags say, read once: [`TaskFlags::read`] destructures every field of
/// [`TaskArgs`], so a flag added there does not compile until it is read.
pub(super) struct TaskFlags {
    labels: Option<PathBuf>,
    limit: Option<u64>,
    output: Option<String>,
    top_k: u64,
    classes: Option<PathBuf>,
    decision: Option<crate::analyses::metrics::Decision>,
    vocab: Option<PathBuf>,
    resamples: u64,
    stat_seed: u64,
    margin: Option<f64>,
    /// The limits, checked.
    pub thresholds: Thresholds,
    /// The flags given that mean something only with a labelled set (`matrix` refuses them
    /// without one).
    pub set_only: Vec<&'static str>,
}

impl TaskFlags {
    /// The flags read and the limits checked.
    pub(super) fn read(a: TaskArgs) -> Result<TaskFlags> {
        let TaskArgs {
            set: SetArgs { labels, limit },
            output,
            top_k,
            classes,
            decision,
            vocab,
            margin,
            stats: StatArgs { resamples, stat_seed },
            limits: AccuracyLimitArgs {
                min_accuracy,
                max_accuracy_drop,
            },
        } = a;
        let thresholds = accuracy_thresholds(min_accuracy, max_accuracy_drop, margin)?;
        let set_only = [
            ("--labels", labels.is_some()),
            ("--limit", limit.is_some()),
            ("--output", output.is_some()),
            ("--classes", classes.is_some()),
            ("--decision", decision.is_some()),
            ("--vocab", vocab.is_some()),
            ("--margin", margin.is_some()),
            ("--min-accuracy", min_accuracy.is_some()),
            ("--max-accuracy-drop", max_accuracy_drop.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        Ok(TaskFlags {
            labels,
            limit,
            output,
            top_k,
            classes,
            decision,
            vocab,
            resamples,
            stat_seed,
            margin,
            thresholds,
            set_only,
        })
    }

    /// The task and the files it was read from.
    pub(super) fn task(&self, choice: TaskChoice) -> Result<(TaskSpec, Vec<PathBuf>)> {
        self.refuse_misplaced(choice)?;
        let files: Vec<PathBuf> = self.classes.iter().chain(&self.vocab).cloned().collect();
        let output = self.output.clone();
        let spec = match choice {
            TaskChoice::Classify => TaskSpec::Classify {
                output,
                top_k: self.top_k as usize,
                classes: self
                    .classes
                    .as_deref()
                    .map(|p| read_text("--classes", p).map(|t| t.lines().map(str::to_string).collect()))
                    .transpose()?,
            },
            TaskChoice::Decide => TaskSpec::Decide {
                decision: self
                    .decision
                    .clone()
                    .ok_or_else(|| bad_flag("--task decide needs --decision OUTPUT>THRESHOLD"))?,
            },
            TaskChoice::Ctc => TaskSpec::Ctc {
                output,
                vocabulary: read_text(
                    "--vocab",
                    self.vocab
                        .as_deref()
                        .ok_or_else(|| bad_flag("--task ctc needs --vocab FILE"))?,
                )?,
            },
            TaskChoice::Agree => TaskSpec::Agree { output },
            TaskChoice::Transcribe | TaskChoice::Generate => {
                return Err(bad_flag(
                    "--task transcribe and --task generate decode a generation spec: npu-audit eval SPEC.toml --dataset DIR --task transcribe (docs/generation.md)",
                ))
            }
        };
        Ok((spec, files))
    }

    /// A task's own flag given with another task is refused, naming the task it belongs to.
    fn refuse_misplaced(&self, choice: TaskChoice) -> Result<()> {
        let misplaced = [
            ("--classes", self.classes.is_some(), TaskChoice::Classify, "classify"),
            ("--vocab", self.vocab.is_some(), TaskChoice::Ctc, "ctc"),
            ("--decision", self.decision.is_some(), TaskChoice::Decide, "decide"),
        ];
        match misplaced.iter().find(|(_, given, own, _)| *given && *own != choice) {
            Some((flag, _, _, task)) => Err(bad_flag(format!("{flag} belongs to --task {task}"))),
            None => Ok(()),
        }
    }

    /// How the statistics are drawn, as the flags say (`sequential`: eval's `--until-decided`).
    pub(super) fn stats(&self, sequential: Option<crate::analyses::accuracy::Sequential>) -> StatOptions {
        StatOptions {
            seed: self.stat_seed,
            resamples: self.resamples as usize,
            margin_points: self.margin,
            sequential,
        }
    }

    /// The set as the flags name it.
    pub(super) fn dataset(&self, dataset: PathBuf) -> DatasetOptions {
        DatasetOptions {
            path: dataset,
            labels: self.labels.clone(),
            limit: self.limit.map(|n| n as usize),
        }
    }
}

/// A shard writes its records to `--out` for `merge`; the report's other files and the per-layer
/// audit of broken samples belong to the merged eval.
fn check_shard_flags(out: Option<&Path>, (report_files, explain): (bool, u64)) -> Result<()> {
    if out.is_none_or(crate::foundation::userfile::is_stdio) {
        return Err(bad_flag(
            "--shard needs --out FILE: the shard's records go there, and `npu-audit merge` joins the shards' files",
        ));
    }
    if report_files {
        return Err(bad_flag(
            "--markdown and --html belong to the merged eval: give them to `npu-audit merge`",
        ));
    }
    if explain > 0 {
        return Err(bad_flag(
            "--explain runs on the whole eval's broken samples: run it without --shard",
        ));
    }
    Ok(())
}

/// Converts `eval`'s flags, once, into the command.
fn command(a: EvalArgs) -> Result<EvalCommand> {
    let EvalArgs {
        model,
        reference,
        dataset,
        task: choice,
        class_axis,
        targets: SetTargetArgs {
            targets,
            allow_failure,
            no_baseline,
        },
        task_args,
        policy: PolicyFileArgs { config, no_config },
        explain,
        records,
        shard,
        costs,
        until_decided,
        order_seed,
        exec,
        reports:
            FindingsReportArgs {
                format,
                out,
                markdown,
                html,
            },
    } = a;
    let task_flags = TaskFlags::read(task_args)?;
    let (task, task_files) = task_flags.task(choice)?;
    let policy = policy_with(config.as_deref(), no_config, &task_flags.thresholds, &allow_failure)?;
    let sequential = until_decided.then_some(crate::analyses::accuracy::Sequential { order_seed });
    let shard = shard.map(ShardFlag::resolve).transpose()?;
    if shard.is_some() {
        check_shard_flags(out.as_deref(), (markdown.is_some() || html.is_some(), explain))?;
    }
    let asked = if targets.is_empty() { &policy.targets } else { &targets };
    // `--records DIR` is the user's; else an eval written to a file keeps its records in the cache
    // (a rerun of the same command resumes), and one only printed in its work directory.
    let records = match (records, &out) {
        (Some(dir), _) => Records::Named(dir),
        (None, Some(o)) if !crate::foundation::userfile::is_stdio(o) => Records::Cached,
        (None, _) => Records::Work,
    };
    let options = EvalOptions {
        model,
        golden: golden_source(reference),
        dataset: task_flags.dataset(dataset),
        task,
        class_axis,
        targets: (!asked.is_empty()).then(|| distinct(asked)),
        allow_failure: policy.allow_failure.clone(),
        baseline: !no_baseline,
        exec: exec_options(exec)?,
        stats: task_flags.stats(sequential),
        policy,
        explain: explain as usize,
        records,
        task_files,
        shard,
        costs: costs.unwrap_or_default(),
    };
    let files = report_files(out, markdown, html);
    Ok(EvalCommand { options, files, format })
}

/// The forms of an eval report (`eval`, `merge` of eval shards, `render`).
pub(super) const FORMS: Forms<EvalReport> = Forms {
    markdown: Some(crate::render::eval::markdown),
    html: Some(crate::render::html::eval::render),
    dispatch: None,
    stdout: stdout_text,
};

/// An eval report's files (`--out` JSON, `--markdown`, `--html`), as `eval` and `merge` write them.
pub(super) fn report_files(
    out: Option<PathBuf>,
    markdown: Option<PathBuf>,
    html: Option<PathBuf>,
) -> Vec<FindingsFile<EvalReport>> {
    findings_files(vec![
        ("--out", out, None),
        ("--markdown", markdown, FORMS.markdown),
        ("--html", html, FORMS.html),
    ])
}

/// An eval report on stdout in the `--format` asked for (`json`: the JSON already rendered).
fn stdout_text(format: ReportFormat, report: &EvalReport, json: String) -> String {
    match format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::eval::table_text(report),
        ReportFormat::Markdown => crate::render::eval::markdown(report),
    }
}

/// Runs `eval`: every file asked for written together once the eval is done (or none), the
/// `--format` rendering on stdout, the exit code the gate decides.
pub fn run(a: EvalArgs) -> Result<ExitCode> {
    let cmd = command(a)?;
    let mut outputs = findings_outputs(&cmd.options, &cmd.files)?;
    if let Records::Named(dir) = &cmd.options.records {
        outputs.check_dir("--records", dir)?;
        outputs.reserve_dir(dir);
        for f in &cmd.files {
            outputs.check(f.flag, &f.path)?;
        }
    }
    if let Some(shard) = cmd.options.shard {
        return run_shard(&cmd, shard, outputs);
    }
    let report = crate::commands::eval::run(&cmd.options, &mut outputs)?;
    crate::foundation::interrupt::check()?;
    emit_findings(&report, &cmd.files, outputs, |r, json| {
        (FORMS.stdout)(cmd.format, r, json)
    })?;
    say_missing_targets(&report);
    Ok(report.exit_code)
}

/// One error line for the required targets that did not run to the end (exit 3), as `compare`
/// prints it; the report has each one's error.
pub(super) fn say_missing_targets(report: &EvalReport) {
    if report.exit_code != ExitCode::TargetFailed {
        return;
    }
    let required: Vec<String> = report
        .gate
        .rules
        .iter()
        .filter(|r| r.rule == crate::report::gate::Rule::Ran && !r.pass)
        .map(|r| {
            let status = report
                .targets
                .iter()
                .find(|t| t.id == r.target)
                .map_or("failed", |t| t.status.as_str());
            format!("{} ({status})", r.target)
        })
        .collect();
    crate::foundation::console::error(&format!(
        "required target(s) did not run to the end: {}",
        required.join(", ")
    ));
}

/// Runs one shard of the eval and writes its file (`--out`) for `merge`; a shard whose file is
/// already complete runs nothing and leaves it as it is.
fn run_shard(cmd: &EvalCommand, shard: crate::commands::shard::Shard, mut outputs: Outputs) -> Result<ExitCode> {
    use crate::commands::eval::shard::ShardRun;
    let out = cmd
        .files
        .iter()
        .find(|f| f.flag == "--out")
        .map(|f| f.path.clone())
        .ok_or_else(|| bad_flag("--shard needs --out FILE"))?;
    let file = match crate::commands::eval::shard::run(&cmd.options, shard, &out, &mut outputs)? {
        ShardRun::AlreadyDone(file) => {
            crate::foundation::console::note(format!(
                "eval shard {}/{} is already done in {}: nothing to run",
                shard.index,
                shard.count,
                out.display()
            ));
            file
        }
        ShardRun::Ran(file) => {
            crate::foundation::interrupt::check()?;
            let json = serde_json::to_string(&file)? + "\n";
            outputs.file("--out", &out, json.as_bytes())?;
            outputs.commit()?;
            file
        }
    };
    super::shared::print_stdout(&crate::commands::eval::shard::summary_text(&file))?;
    Ok(ExitCode::Success)
}

/// Runs `sample-size`: the samples a drop limit needs at expected rates or an earlier eval's.
pub fn sample_size(a: super::args::SampleSizeArgs) -> Result<ExitCode> {
    use crate::commands::eval::sizing::{from_report, row, Sizing};
    let percent = |flag: &str, v: f64| -> Result<f64> {
        if v.is_finite() && (0.0..=100.0).contains(&v) {
            Ok(v / 100.0)
        } else {
            Err(bad_flag(format!("{flag} must be a percentage between 0 and 100")))
        }
    };
    let limit = a.max_accuracy_drop;
    if !(limit.is_finite() && limit > 0.0 && limit < 100.0) {
        return Err(bad_flag(
            "--max-accuracy-drop must be a number of points between 0 and 100",
        ));
    }
    if !(a.power.is_finite() && (0.5..1.0).contains(&a.power)) {
        return Err(bad_flag(
            "--power must be a probability from 0.5 (even odds, always given beside it) to below 1",
        ));
    }
    let (rows, source) = match (&a.from, a.flip_rate, a.broken, a.fixed) {
        (Some(path), ..) => {
            let report = read_eval_report("--from", path)?;
            let rows = from_report(&report, limit, a.power);
            if rows.is_empty() {
                return Err(crate::foundation::error::bad_report(format!(
                    "--from {}: no target compared with the reference on accuracy (the CER's drop has no sample-size formula)",
                    path.display()
                )));
            }
            (rows, path.display().to_string())
        }
        (None, Some(flips), _, _) => {
            let flips = percent("--flip-rate", flips)?;
            let drop = a.drop.unwrap_or(0.0);
            if !drop.is_finite() {
                return Err(bad_flag("--drop must be a number of points"));
            }
            let drop = drop / 100.0;
            let (broken, fixed) = ((flips + drop) / 2.0, (flips - drop) / 2.0);
            if broken < 0.0 || fixed < 0.0 {
                return Err(bad_flag(
                    "--drop cannot exceed --flip-rate either way: the drop is broken minus fixed",
                ));
            }
            (
                vec![row("expected", (broken, fixed), limit, a.power)],
                "expected".into(),
            )
        }
        (None, None, Some(b), Some(f)) => {
            let rates = (percent("--broken", b)?, percent("--fixed", f)?);
            (vec![row("expected", rates, limit, a.power)], "expected".into())
        }
        _ => {
            return Err(bad_flag(
                "give the rates: --flip-rate PERCENT, --broken and --fixed, or --from EVAL.json",
            ))
        }
    };
    let sizing = Sizing {
        limit_points: limit,
        power: a.power,
        source,
        rows,
    };
    let text = match a.format {
        super::args::Format::Json => serde_json::to_string_pretty(&sizing)? + "\n",
        super::args::Format::Table => crate::render::eval::sizing_text(&sizing),
    };
    super::shared::print_stdout(&text)?;
    Ok(ExitCode::Success)
}

/// An eval's JSON report named with `flag`, read and parsed; a report of another kind is refused,
/// named.
pub(super) fn read_eval_report(flag: &str, path: &Path) -> Result<EvalReport> {
    let shown = format!("{flag} {}", path.display());
    let bytes = crate::foundation::userfile::read_user_file(path).map_err(|e| bad_flag(format!("{shown}: {e}")))?;
    match crate::report::json::any_from_bytes(bytes, &shown)? {
        crate::report::json::AnyReport::Eval(r) => Ok(*r),
        other => Err(crate::foundation::error::bad_report(format!(
            "{shown}: {}; {flag} reads an eval report (npu-audit eval --out FILE)",
            other.kind().noun()
        ))),
    }
}
