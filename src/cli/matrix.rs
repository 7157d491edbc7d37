//! `npu-audit matrix`: the flags turned once into the matrix's options, the matrix run, its
//! table, JSON, Markdown, HTML and dispatch table.

use anyhow::Result;

use super::args::{MatrixArgs, RemedyChoice, ReportFormat};
use super::shared::{
    emit_findings, exec_options, findings_files, findings_outputs, gate_policy, golden_source, input_options,
    FindingsFile, Forms,
};
use crate::commands::matrix::remedy::RemedyKind;
use crate::commands::matrix::{Matrix, MatrixOptions, RemedyOptions, Variant};
use crate::foundation::error::{bad_flag, ExitCode};

/// `matrix` as asked: its options, the files it writes and how it prints.
struct MatrixCommand {
    options: MatrixOptions,
    files: Vec<FindingsFile<Matrix>>,
    format: ReportFormat,
}

/// The forms of a matrix report (`matrix`, `render`).
pub(super) const FORMS: Forms<Matrix> = Forms {
    markdown: Some(crate::render::matrix::markdown),
    html: Some(crate::render::html::matrix::render),
    dispatch: Some(crate::render::matrix::dispatch_json),
    stdout: stdout_text,
};

/// A matrix on stdout in the `--format` asked for (`json`: the JSON already rendered).
fn stdout_text(format: ReportFormat, matrix: &Matrix, json: String) -> String {
    match format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::matrix::table(matrix),
        ReportFormat::Markdown => crate::render::matrix::markdown(matrix),
    }
}

/// The remedies `--search` names, each once, in the order named.
fn remedy_kinds(search: &[RemedyChoice]) -> Vec<RemedyKind> {
    let mut kinds: Vec<RemedyKind> = Vec::new();
    for kind in search.iter().map(|s| match s {
        RemedyChoice::Widen16 => RemedyKind::Widen16,
        RemedyChoice::Float => RemedyKind::Float,
    }) {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

/// Converts `matrix`'s flags, once, into the command.
fn command(a: MatrixArgs) -> Result<MatrixCommand> {
    let MatrixArgs {
        variants,
        targets,
        cost,
        class_axis,
        search,
        max_promoted,
        write_candidates,
        reference,
        inputs,
        gate,
        exec,
        format,
        out,
        markdown,
        html,
        dispatch,
        dataset,
        task,
        task_args,
    } = a;
    check_variants(&variants, &cost)?;
    if gate.baseline_report.is_some() || gate.max_layer_sqnr_loss.is_some() {
        return Err(bad_flag(
            "matrix judges each cell against limits: --baseline-report and --max-layer-sqnr-loss do not apply",
        ));
    }
    if let Some(dir) = &write_candidates {
        crate::foundation::userfile::check_dir_destination("--write-candidates", dir)?;
        if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
            return Err(bad_flag(format!(
                "--write-candidates {}: give a new or empty directory",
                dir.display()
            )));
        }
    }
    let kinds = remedy_kinds(&search);
    let task_flags = super::eval::TaskFlags::read(task_args)?;
    let task = matrix_task(dataset, task, &task_flags)?;
    if task.is_some() {
        refuse_signal_flags(&inputs, &gate, !kinds.is_empty())?;
    }
    let policy = gate_policy(&gate, &[])?.with_flags(&task_flags.thresholds, &[], None)?;
    // As `compare`: the targets named, else the policy file's, else every runnable one.
    let asked = if targets.is_empty() { &policy.targets } else { &targets };
    let options = MatrixOptions {
        variants,
        targets: crate::commands::matrix::expand_targets(asked)?,
        golden: golden_source(reference),
        inputs: input_options(inputs),
        exec: exec_options(exec)?,
        policy,
        class_axis,
        cost,
        remedies: RemedyOptions {
            kinds,
            max_promoted: max_promoted as usize,
            write_candidates,
        },
        task,
    };
    let files = findings_files(vec![
        ("--out", out, None),
        ("--markdown", markdown, FORMS.markdown),
        ("--html", html, FORMS.html),
        ("--dispatch", dispatch, FORMS.dispatch),
    ]);
    Ok(MatrixCommand { options, files, format })
}

/// Refuses, on a labelled set, the flags that only mean something to a matrix in signal terms:
/// the set is the inputs, and the cells are judged by the accuracy limits alone.
fn refuse_signal_flags(inputs: &super::args::InputArgs, gate: &super::args::GateArgs, search: bool) -> Result<()> {
    let input_flags = [
        ("--inputs", !inputs.npz.is_empty()),
        ("--input", !inputs.npy.is_empty()),
        ("--gen", !inputs.gen.is_empty()),
        ("--seed", inputs.seed != 0),
        ("--samples", inputs.samples != 1),
        ("--input-shape", !inputs.shapes.is_empty()),
    ];
    if let Some((flag, _)) = input_flags.iter().find(|(_, set)| *set) {
        return Err(bad_flag(format!(
            "{flag} chooses the inputs of a matrix in signal terms; on a labelled set the samples of --dataset are the inputs"
        )));
    }
    let mut gate_flags = super::shared::signal_limits_given(gate);
    gate_flags.extend(search.then_some("--search"));
    match gate_flags.first() {
        Some(flag) => Err(bad_flag(format!(
            "{flag} judges a matrix in signal terms; on a labelled set (--task) the cells are judged by --min-accuracy and --max-accuracy-drop"
        ))),
        None => Ok(()),
    }
}

/// `--dataset` and `--task` as the matrix's task; the task's flags without them are refused.
fn matrix_task(
    dataset: Option<std::path::PathBuf>,
    task: Option<super::args::TaskChoice>,
    flags: &super::eval::TaskFlags,
) -> Result<Option<crate::commands::matrix::MatrixTaskOptions>> {
    let (Some(dataset), Some(choice)) = (dataset, task) else {
        if let Some(flag) = flags.set_only.first() {
            return Err(bad_flag(format!(
                "{flag} belongs to a matrix on a labelled set (--dataset, --task)"
            )));
        }
        return Ok(None);
    };
    let (spec, task_files) = flags.task(choice)?;
    Ok(Some(crate::commands::matrix::MatrixTaskOptions {
        dataset: flags.dataset(dataset),
        task: spec,
        task_files,
        stats: flags.stats(None),
    }))
}

/// Every variant has its own name and is a file; `--cost` names each once.
fn check_variants(variants: &[Variant], cost: &[String]) -> Result<()> {
    for (i, v) in variants.iter().enumerate() {
        if variants[..i].iter().any(|w| w.name == v.name) {
            return Err(bad_flag(format!("--variant {}: the name is given twice", v.name)));
        }
        if !v.path.is_file() {
            return Err(bad_flag(format!(
                "--variant {}: {} is not a file",
                v.name,
                v.path.display()
            )));
        }
    }
    if !cost.is_empty() {
        let mut named: Vec<&str> = cost.iter().map(String::as_str).collect();
        named.sort_unstable();
        let mut all: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
        all.sort_unstable();
        if named != all {
            return Err(bad_flag(format!(
                "--cost must name every variant once: {}",
                all.join(",")
            )));
        }
    }
    Ok(())
}

/// Runs `matrix`: every file asked for written together once the matrix is done (or none), the
/// `--format` rendering on stdout; exit 1 when some target has no variant that meets the policy.
pub fn run(a: MatrixArgs) -> Result<ExitCode> {
    let cmd = command(a)?;
    let mut outputs = findings_outputs(&cmd.options, &cmd.files)?;
    if let Some(dir) = &cmd.options.remedies.write_candidates {
        outputs.check_dir("--write-candidates", dir)?;
    }
    let matrix = crate::commands::matrix::run(&cmd.options, &mut outputs)?;
    crate::foundation::interrupt::check()?;
    emit_findings(&matrix, &cmd.files, outputs, |m, json| {
        (FORMS.stdout)(cmd.format, m, json)
    })?;
    Ok(matrix.exit_code)
}
