//! `npu-audit runtime`: the catalogue of releases, installing and removing them, and the
//! bisection of a target's output across releases.

use anyhow::Result;

use super::args::{Format, RuntimeCommand};
use super::commands::{
    emit_findings, findings_outputs, json_out, print_json, print_stdout, runtime_choice, FindingsFile,
};
use crate::error::ExitCode;
use crate::listing;
use crate::runtime::Provisioner;

/// Runs one `runtime` subcommand.
pub fn run(command: RuntimeCommand) -> Result<ExitCode> {
    match command {
        RuntimeCommand::List { all, format } => {
            let rows = listing::runtime_rows(all)?;
            match format {
                Format::Json => print_json(&rows)?,
                Format::Table => print_stdout(&(crate::render::listing::runtime_table(&rows, all) + "\n"))?,
            }
        }
        RuntimeCommand::Install { keys, runtime_env } => {
            let p = Provisioner::new(&runtime_choice(&[], &runtime_env))?;
            for b in listing::install_keys(&keys)? {
                let rt = p.get(b)?;
                print_stdout(&format!("{} {} {}\n", b.key, b.label(), rt.library.display()))?;
            }
        }
        RuntimeCommand::Path { key, runtime_env } => {
            let p = Provisioner::new(&runtime_choice(&[], &runtime_env))?;
            let build = listing::install_keys(std::slice::from_ref(&key))?;
            // A plugin release brings its host: the path asked for is the first.
            if let Some(b) = build.first() {
                print_stdout(&format!("{}\n", p.get(b)?.library.display()))?;
            }
        }
        RuntimeCommand::Gc {
            keep_days,
            dry_run,
            format,
        } => {
            if !(keep_days.is_finite() && keep_days >= 0.0) {
                return Err(crate::error::bad_flag(
                    "--keep-days must be a number of days, 0 or more",
                ));
            }
            let rows = listing::gc(keep_days, dry_run)?;
            match format {
                Format::Json => print_json(&rows)?,
                Format::Table => print_stdout(&(crate::render::listing::gc_table(&rows, dry_run) + "\n"))?,
            }
        }
        RuntimeCommand::Bisect(a) => return bisect(&a),
    }
    Ok(ExitCode::Success)
}

/// `runtime bisect`: the findings on stdout (and as JSON in `--out`).
fn bisect(a: &super::args::ReleaseBisectArgs) -> Result<ExitCode> {
    let reads: Vec<std::path::PathBuf> = [Some(a.model.clone()), a.reference.reference.clone()]
        .into_iter()
        .flatten()
        .chain(a.inputs.npz.iter().cloned())
        .collect();
    let files: Vec<FindingsFile<_>> = json_out(a.out.as_ref());
    let outputs = findings_outputs(&files, reads)?;
    let opts = super::compare::release_bisect_options(a)?;
    let found = crate::releases::bisect(&opts)?;
    emit_findings(&found, &files, outputs, |found, json| match a.format {
        Format::Json => json,
        Format::Table => crate::render::releases::render(found),
    })
}
