//! `npu-audit eval SPEC.toml --task transcribe|generate`: a generation spec's own command line
//! (`GenerationArgs`, parsed apart from a one-pass eval's, so a flag that means nothing to a
//! decode is one clap does not know here), turned once into the audit's options; the audit run,
//! its table, JSON, Markdown and HTML.

use std::ffi::OsString;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches};

use super::args::{
    AccuracyLimitArgs, FindingsReportArgs, GenerationArgs, GenerationCli, GenerationTaskChoice, PolicyFileArgs,
    ReportFormat, SetArgs, SetTargetArgs, StatArgs,
};
use super::shared::{emit_findings, exec_options, findings_files, findings_outputs, policy_with, FindingsFile, Forms};
use crate::analyses::accuracy::StatOptions;
use crate::commands::eval::DatasetOptions;
use crate::commands::generation::{GenerationOptions, GenerationTask};
use crate::data::target::distinct;
use crate::foundation::error::ExitCode;
use crate::report::generation::GenerationReport;

/// The forms of a generation report (`eval` and `render`).
pub(super) const FORMS: Forms<GenerationReport> = Forms {
    markdown: Some(crate::render::generation::markdown),
    html: Some(crate::render::html::generation::render),
    dispatch: None,
    stdout: stdout_text,
};

fn stdout_text(format: ReportFormat, report: &GenerationReport, json: String) -> String {
    match format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::generation::table_text(report),
        ReportFormat::Markdown => crate::render::generation::markdown(report),
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
        policy: PolicyFileArgs { config, no_config },
        explain,
        exec,
        reports:
            FindingsReportArgs {
                format,
                out,
                markdown,
                html,
            },
    } = a;
    let thresholds = super::shared::accuracy_thresholds(min_accuracy, max_accuracy_drop, None)?;
    let policy = policy_with(config.as_deref(), no_config, &thresholds, &allow_failure)?;
    let asked = if targets.is_empty() { &policy.targets } else { &targets };
    let options = GenerationOptions {
        spec,
        task: match task {
            GenerationTaskChoice::Transcribe => GenerationTask::Transcribe,
            GenerationTaskChoice::Generate => GenerationTask::Generate,
        },
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
