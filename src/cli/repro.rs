//! `npu-audit repro`: the flags turned once into the repro's options, the search, the bundle and
//! the reports (table, JSON, Markdown).

use anyhow::Result;

use super::args::{ReportFormat, ReproArgs};
use super::shared::{emit_findings, exec_options, findings_files, findings_outputs, input_options, Forms};
use crate::commands::compare::{Audited, GoldenSource};
use crate::commands::repro::{AgainstChoice, ReproOptions};
use crate::data::target::{ReleaseSpec, TargetSpec};
use crate::foundation::error::{bad_flag, bad_output, ExitCode};
use crate::report::repro::{Criterion, ReproReport};

/// The forms of a repro report (`repro`, `render`).
pub(super) const FORMS: Forms<ReproReport> = Forms {
    markdown: Some(crate::render::repro::markdown),
    html: None,
    dispatch: None,
    stdout: stdout_text,
};

/// A repro report on stdout in the `--format` asked for (`json`: the JSON already rendered).
fn stdout_text(format: ReportFormat, report: &ReproReport, json: String) -> String {
    match format {
        ReportFormat::Json => json,
        ReportFormat::Table => crate::render::repro::table_text(report),
        ReportFormat::Markdown => crate::render::repro::markdown(report),
    }
}

/// One target spec as a flag names it: a single target, one release.
fn one_target(flag: &str, text: &str) -> Result<TargetSpec> {
    let mut specs = TargetSpec::parse_many(text).map_err(|e| bad_flag(format!("{flag} {text}: {e:#}")))?;
    if specs.len() != 1 {
        return Err(bad_flag(format!(
            "{flag} {text} names {} targets: repro takes one",
            specs.len()
        )));
    }
    let spec = specs.remove(0);
    if spec.release == Some(ReleaseSpec::All) {
        return Err(bad_flag(format!(
            "{flag} {text}: @all names every release; repro takes one"
        )));
    }
    Ok(spec)
}

/// What departing means, from the flags.
fn criterion(a: &ReproArgs) -> Result<Criterion> {
    if a.max_sqnr.is_some_and(|v| !v.is_finite()) {
        return Err(bad_flag("--max-sqnr must be a finite number of dB"));
    }
    if !(a.float_tolerance.is_finite() && a.float_tolerance >= 0.0) {
        return Err(bad_flag("--float-tolerance must be a non-negative fraction"));
    }
    let mut c = Criterion {
        min_steps: a.min_steps,
        max_sqnr_db: a.max_sqnr,
        float_tolerance: a.float_tolerance,
        text: String::new(),
    };
    c.text = crate::commands::repro::figures::criterion_text(&c);
    Ok(c)
}

/// Converts `repro`'s flags, once, into its options and the report files.
fn command(
    a: ReproArgs,
) -> Result<(
    ReproOptions,
    Vec<super::shared::FindingsFile<ReproReport>>,
    ReportFormat,
)> {
    let criterion = criterion(&a)?;
    let ReproArgs {
        model,
        reference,
        inputs,
        target,
        against,
        layer,
        min_steps: _,
        max_sqnr: _,
        float_tolerance: _,
        scrub_weights,
        scrub_seed,
        out,
        exec,
        format,
        report,
        markdown,
    } = a;
    let target = one_target("--target", &target)?;
    let against = if against.trim().eq_ignore_ascii_case("golden") {
        AgainstChoice::Golden
    } else {
        AgainstChoice::Target(one_target("--against", &against)?)
    };
    let options = ReproOptions {
        audited: Audited {
            model,
            golden: GoldenSource {
                reference,
                ..GoldenSource::default()
            },
            inputs: input_options(inputs),
        },
        exec: exec_options(exec)?,
        target,
        against,
        layer,
        criterion,
        scrub_seed: scrub_weights.then_some(scrub_seed),
        bundle: out,
    };
    let files = findings_files(vec![
        ("--report", report, None),
        ("--markdown", markdown, FORMS.markdown),
    ]);
    Ok((options, files, format))
}

/// Runs `repro`: the bundle (when it reproduces and `--out` names where) and every report file
/// written together once the search is done (or none), the `--format` rendering on stdout.
pub fn run(a: ReproArgs) -> Result<ExitCode> {
    let (options, files, format) = command(a)?;
    let mut outputs = findings_outputs(&options, &files)?;
    if let Some(dest) = &options.bundle {
        if crate::foundation::userfile::is_stdio(dest) {
            return Err(bad_output(
                "--out -: a bundle is a directory or a .zip file, not standard output",
            ));
        }
        // A bundle leaves the machine: it never replaces a file nor writes through a link.
        if crate::commands::repro::is_zip(dest) {
            outputs.check_new("--out", dest)?;
        } else {
            outputs.check_dir("--out", dest)?;
            if std::fs::symlink_metadata(dest).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(bad_output(format!(
                    "--out {} is a symbolic link: a bundle is written into a new or empty directory of its own",
                    dest.display()
                )));
            }
            crate::commands::compare::plan::check_save_dir(dest, "--out")?;
        }
        if let Some(f) = files.iter().find(|f| &f.path == dest) {
            return Err(bad_output(format!(
                "--out and {} name the same file {}",
                f.flag,
                dest.display()
            )));
        }
    }
    let report = crate::commands::repro::run(&options, &mut outputs)?;
    crate::foundation::interrupt::check()?;
    emit_findings(&report, &files, outputs, |r, json| (FORMS.stdout)(format, r, json))?;
    Ok(report.exit_code)
}
