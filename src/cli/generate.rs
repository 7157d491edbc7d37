//! `npu-audit eval SPEC.toml --task transcribe|generate`: `eval`'s flags read for a generation
//! spec (the flags of a one-pass eval that mean nothing to a decode refused by name), the audit
//! run, its table, JSON, Markdown and HTML.

use anyhow::Result;

use super::args::{EvalArgs, ReferenceArgs, ReportFormat, TaskArgs, TaskChoice};
use super::shared::{emit_findings, exec_options, findings_files, findings_outputs, policy_with, FindingsFile, Forms};
use crate::analyses::accuracy::StatOptions;
use crate::commands::eval::DatasetOptions;
use crate::commands::generation::{GenerationOptions, GenerationTask};
use crate::data::target::distinct;
use crate::foundation::error::{bad_flag, ExitCode};
use crate::report::generation::GenerationReport;

/// Whether `eval`'s task is a decode of a generation spec.
pub(super) fn is_generation(task: TaskChoice) -> bool {
    matches!(task, TaskChoice::Transcribe | TaskChoice::Generate)
}

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

/// The flags given that a generation audit has no use for, by name.
fn refused(a: &EvalArgs) -> Vec<&'static str> {
    let ReferenceArgs {
        reference,
        golden_dir,
        allow_golden_mismatch,
    } = &a.reference;
    let TaskArgs {
        output,
        top_k,
        classes,
        decision,
        vocab,
        margin,
        min_accuracy,
        max_accuracy_drop: _,
        labels: _,
        limit: _,
        resamples: _,
        stat_seed: _,
    } = &a.task_args;
    [
        (
            "--reference (the spec's `reference` names the fp32 spec)",
            reference.is_some(),
        ),
        ("--golden", golden_dir.is_some()),
        ("--allow-golden-mismatch", *allow_golden_mismatch),
        ("--output", output.is_some()),
        ("--top-k", *top_k != 5),
        ("--classes", classes.is_some()),
        ("--decision", decision.is_some()),
        ("--vocab (the spec names its tokenizer)", vocab.is_some()),
        ("--margin", margin.is_some()),
        ("--min-accuracy", min_accuracy.is_some()),
        ("--class-axis", !a.class_axis.is_empty()),
        ("--records", a.records.is_some()),
        ("--shard", a.shard.is_some()),
        ("--costs", a.costs.is_some()),
        ("--until-decided", a.until_decided),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect()
}

/// Runs the generation audit `eval` was asked for.
pub(super) fn run(a: EvalArgs) -> Result<ExitCode> {
    let refused = refused(&a);
    if let Some(flag) = refused.first() {
        return Err(bad_flag(format!(
            "{flag} does not apply to --task {}: a generation spec is decoded whole, token by token (docs/generation.md)",
            if a.task == TaskChoice::Transcribe { "transcribe" } else { "generate" }
        )));
    }
    let a_explain = a.explain as usize;
    let EvalArgs {
        model,
        dataset,
        task,
        targets,
        allow_failure,
        no_baseline,
        task_args,
        config,
        no_config,
        exec,
        format,
        out,
        markdown,
        html,
        ..
    } = a;
    // `eval`'s own check of the limit (the one flag of its gate a decode is held to).
    let thresholds = super::shared::accuracy_thresholds(None, task_args.max_accuracy_drop, None)?;
    let policy = policy_with(config.as_deref(), no_config, &thresholds, &allow_failure)?;
    let asked = if targets.is_empty() { &policy.targets } else { &targets };
    let options = GenerationOptions {
        spec: model,
        task: if task == TaskChoice::Transcribe {
            GenerationTask::Transcribe
        } else {
            GenerationTask::Generate
        },
        dataset: DatasetOptions {
            path: dataset,
            labels: task_args.labels,
            limit: task_args.limit.map(|n| n as usize),
        },
        targets: (!asked.is_empty()).then(|| distinct(asked)),
        allow_failure: policy.allow_failure.clone(),
        baseline: !no_baseline,
        exec: exec_options(exec)?,
        stats: StatOptions {
            seed: task_args.stat_seed,
            resamples: task_args.resamples as usize,
            margin_points: None,
            sequential: None,
        },
        policy,
        explain: a_explain,
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
