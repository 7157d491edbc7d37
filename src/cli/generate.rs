//! `npu-audit eval SPEC.toml --task transcribe|generate`: a generation spec's own command line
//! (`GenerationArgs`, parsed apart from a one-pass eval's, so a flag that means nothing to a
//! decode is one clap does not know here), turned once into the audit's options; the audit run,
//! its table, JSON, Markdown and HTML.

use std::ffi::OsString;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches};

use super::args::{
    AccuracyLimitArgs, CorpusLimitArgs, FindingsReportArgs, GenerationArgs, GenerationCli, GenerationTaskChoice,
    PolicyFileArgs, ReportFormat, SetArgs, SetTargetArgs, StatArgs,
};
use super::shared::{emit_findings, exec_options, findings_files, findings_outputs, policy_with, FindingsFile, Forms};
use crate::analyses::accuracy::StatOptions;
use crate::commands::eval::DatasetOptions;
use crate::commands::generation::{GenerationOptions, GenerationTask};
use crate::data::target::distinct;
use crate::foundation::error::{bad_flag, ExitCode};
use crate::judge::policy::{CorpusThresholds, Thresholds};
use crate::report::generation::GenerationReport;

/// The forms of a generation report (`eval` and `render`): a corpus drift report's own for
/// `--task score`.
pub(super) const FORMS: Forms<GenerationReport> = Forms {
    markdown: Some(markdown),
    html: Some(crate::render::html::generation::render),
    dispatch: None,
    stdout: stdout_text,
};

fn markdown(report: &GenerationReport) -> String {
    if report.task == GenerationTask::Score {
        crate::render::corpus::markdown(report)
    } else {
        crate::render::generation::markdown(report)
    }
}

fn stdout_text(format: ReportFormat, report: &GenerationReport, json: String) -> String {
    match format {
        ReportFormat::Json => json,
        ReportFormat::Table if report.task == GenerationTask::Score => crate::render::corpus::table_text(report),
        ReportFormat::Table => crate::render::generation::table_text(report),
        ReportFormat::Markdown => markdown(report),
    }
}

/// Whether a command line runs `eval` on a generation spec: its MODEL, the first argument after
/// `eval` that is neither a flag nor a flag's value, is a `.toml` file.
pub(super) fn is_spec_eval(argv: &[OsString]) -> bool {
    let root = super::args::Cli::command();
    let Some(eval) = root.find_subcommand("eval") else {
        return false;
    };
    let mut args = argv.iter().skip(1).map(|a| a.to_string_lossy().into_owned());
    // The global flags before the command, then the command.
    loop {
        match args.next() {
            Some(a) if a == "eval" => break,
            Some(a) if takes_value(&root, &a) => {
                args.next();
            }
            Some(a) if a.starts_with('-') => {}
            _ => return false,
        }
    }
    while let Some(a) = args.next() {
        if a == "--" {
            return args.next().is_some_and(|m| is_spec(&m));
        }
        if takes_value(eval, &a) {
            args.next();
        } else if !a.starts_with('-') || a == "-" {
            return is_spec(&a);
        }
    }
    false
}

/// A spec is a `.toml` file.
fn is_spec(model: &str) -> bool {
    std::path::Path::new(model)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
}

/// Whether `arg` is a flag of `cmd` whose value is the next argument (`--dataset DIR`, `-t X`;
/// not `--dataset=DIR`).
fn takes_value(cmd: &clap::Command, arg: &str) -> bool {
    let flag = |a: &clap::Arg| a.get_action().takes_values();
    if let Some(long) = arg.strip_prefix("--") {
        return !long.contains('=') && cmd.get_arguments().any(|a| a.get_long() == Some(long) && flag(a));
    }
    match arg.strip_prefix('-').map(|s| s.chars().collect::<Vec<_>>()).as_deref() {
        Some([c]) => cmd.get_arguments().any(|a| a.get_short() == Some(*c) && flag(a)),
        _ => false,
    }
}

/// Parses a generation spec's command line (`npu-audit ... eval SPEC.toml ...`): the command's
/// own flags and the global ones.
pub(super) fn parse(argv: &[OsString]) -> Result<GenerationCli, clap::Error> {
    let at = argv.iter().position(|a| a == "eval").unwrap_or(0);
    // The globals before `eval` are as valid after it: clap reads them as the command's.
    let mut line: Vec<OsString> = vec!["npu-audit eval".into()];
    line.extend(argv[1..at].iter().cloned());
    line.extend(argv[at + 1..].iter().cloned());
    let cmd = super::help::generation_command().bin_name("npu-audit eval");
    let matches = cmd.try_get_matches_from(line)?;
    GenerationCli::from_arg_matches(&matches)
}

/// Runs the generation audit of a spec's command line.
pub(super) fn run(a: GenerationArgs) -> Result<ExitCode> {
    let GenerationArgs {
        spec,
        dataset,
        set: SetArgs { labels, limit },
        task,
        targets: SetTargetArgs {
            targets,
            allow_failure,
            no_baseline,
        },
        stats: StatArgs { resamples, stat_seed },
        limits: AccuracyLimitArgs {
            min_accuracy,
            max_accuracy_drop,
        },
        corpus_limits,
        policy: PolicyFileArgs { config, no_config },
        explain,
        prompt_lengths,
        exec,
        reports:
            FindingsReportArgs {
                format,
                out,
                markdown,
                html,
            },
    } = a;
    let task = match task {
        GenerationTaskChoice::Transcribe => GenerationTask::Transcribe,
        GenerationTaskChoice::Generate => GenerationTask::Generate,
        GenerationTaskChoice::Score => GenerationTask::Score,
    };
    let mut thresholds = super::shared::accuracy_thresholds(min_accuracy, max_accuracy_drop, None)?;
    thresholds.corpus = corpus_thresholds(&corpus_limits)?;
    refuse_other_tasks_limits(task, &thresholds)?;
    let policy = policy_with(config.as_deref(), no_config, &thresholds, &allow_failure)?;
    let asked = if targets.is_empty() { &policy.targets } else { &targets };
    let options = GenerationOptions {
        spec,
        task,
        dataset: DatasetOptions {
            path: dataset,
            labels,
            limit: limit.map(|n| n as usize),
        },
        targets: (!asked.is_empty()).then(|| distinct(asked)),
        allow_failure: policy.allow_failure.clone(),
        baseline: !no_baseline,
        exec: exec_options(exec)?,
        stats: StatOptions {
            seed: stat_seed,
            resamples: resamples as usize,
            margin_points: None,
            sequential: None,
        },
        policy,
        explain: explain as usize,
        prompt_lengths: prompt_lengths.map(|p| p.0).unwrap_or_default(),
    };
    let files: Vec<FindingsFile<GenerationReport>> = findings_files(vec![
        ("--out", out, None),
        ("--markdown", markdown, FORMS.markdown),
        ("--html", html, FORMS.html),
    ]);
    let mut outputs = findings_outputs(&options, &files)?;
    let report = crate::commands::generation::run(&options, &mut outputs)?;
    crate::foundation::interrupt::check()?;
    emit_findings(&report, &files, outputs, |r, json| (FORMS.stdout)(format, r, json))?;
    Ok(report.exit_code)
}

/// The corpus limits given as flags, checked.
fn corpus_thresholds(a: &CorpusLimitArgs) -> Result<CorpusThresholds> {
    let CorpusLimitArgs {
        max_kld_mean,
        max_kld_p99,
        min_same_top,
        max_ppl_ratio,
    } = *a;
    let non_negative = |v: Option<f64>| v.is_some_and(|v| !(v.is_finite() && v >= 0.0));
    if non_negative(max_kld_mean) || non_negative(max_kld_p99) {
        return Err(bad_flag(
            "--max-kld-mean and --max-kld-p99 take a non-negative number of nats",
        ));
    }
    if min_same_top.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
        return Err(bad_flag("--min-same-top must be a fraction between 0 and 1"));
    }
    if non_negative(max_ppl_ratio) {
        return Err(bad_flag(
            "--max-ppl-ratio must be a non-negative ratio (1.01: 1% higher)",
        ));
    }
    Ok(CorpusThresholds {
        max_kld_mean,
        max_kld_p99,
        min_same_top,
        max_ppl_ratio,
    })
}

/// A limit flag the task does not gate with is refused (exit 2): `--max-accuracy-drop` means
/// nothing to a corpus, `--max-kld-mean` nothing to a decode.
fn refuse_other_tasks_limits(task: GenerationTask, t: &Thresholds) -> Result<()> {
    let c = &t.corpus;
    let given = if task == GenerationTask::Score {
        [
            ("--min-accuracy", t.min_accuracy.is_some()),
            ("--max-accuracy-drop", t.max_accuracy_drop.is_some()),
        ]
        .to_vec()
    } else {
        [
            ("--max-kld-mean", c.max_kld_mean.is_some()),
            ("--max-kld-p99", c.max_kld_p99.is_some()),
            ("--min-same-top", c.min_same_top.is_some()),
            ("--max-ppl-ratio", c.max_ppl_ratio.is_some()),
        ]
        .to_vec()
    };
    match given.iter().find(|(_, set)| *set) {
        Some((flag, _)) if task == GenerationTask::Score => Err(bad_flag(format!(
            "{flag} is for --task generate and transcribe; --task score gates with --max-kld-mean, --max-kld-p99, --min-same-top and --max-ppl-ratio"
        ))),
        Some((flag, _)) => Err(bad_flag(format!(
            "{flag} is for --task score; --task {} gates with --max-accuracy-drop and --min-accuracy",
            task.name()
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn a_spec_is_the_first_argument_after_eval_that_is_no_flags_value() {
        assert!(is_spec_eval(&argv(
            "npu-audit eval s.toml --dataset d --task transcribe"
        )));
        assert!(is_spec_eval(&argv(
            "npu-audit -v eval --dataset d.toml s.TOML --task generate"
        )));
        assert!(is_spec_eval(&argv("npu-audit --cache-dir c eval -t cpu s.toml")));
        assert!(!is_spec_eval(&argv(
            "npu-audit eval m.onnx --config p.toml --dataset d"
        )));
        assert!(!is_spec_eval(&argv("npu-audit eval --config p.toml m.onnx")));
        assert!(!is_spec_eval(&argv("npu-audit compare s.toml")));
        assert!(is_spec_eval(&argv("npu-audit eval --dataset=d -- s.toml")));
    }
}
