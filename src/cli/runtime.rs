//! `npu-audit runtime`: the catalogue of releases, installing and removing them, and the
//! bisection of a target's output across releases.

use anyhow::Result;

use super::args::{Format, ReleaseBisectArgs, RuntimeCommand};
use super::shared::{
    emit_findings, exec_options, findings_files, findings_outputs, golden_source, input_options, print_json,
    print_stdout, runtime_choice,
};
use crate::analyses::layers::LayerOptions;
use crate::commands::bisect::ReleaseBisectOptions;
use crate::commands::compare::Audited;
use crate::commands::runtime_cache;
use crate::execution::runtime::Provisioner;
use crate::foundation::error::{bad_flag, ExitCode};

/// Runs one `runtime` subcommand.
pub fn run(command: RuntimeCommand) -> Result<ExitCode> {
    match command {
        RuntimeCommand::List { all, format } => {
            let rows = runtime_cache::runtime_rows(all)?;
            match format {
                Format::Json => print_json(&rows)?,
                Format::Table => print_stdout(&(crate::render::runtime_cache::runtime_table(&rows, all) + "\n"))?,
            }
        }
        RuntimeCommand::Install { keys, runtime_env } => {
            let p = Provisioner::new(&runtime_choice(Vec::new(), &runtime_env))?;
            for b in runtime_cache::install_keys(&keys)? {
                let rt = p.get(b)?;
                print_stdout(&format!("{} {} {}\n", b.key, b.label(), rt.library.display()))?;
            }
        }
        RuntimeCommand::Path { key, runtime_env } => {
            let p = Provisioner::new(&runtime_choice(Vec::new(), &runtime_env))?;
            let build = runtime_cache::install_keys(std::slice::from_ref(&key))?;
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
                return Err(bad_flag("--keep-days must be a number of days, 0 or more"));
            }
            let rows = runtime_cache::gc(keep_days, dry_run)?;
            match format {
                Format::Json => print_json(&rows)?,
                Format::Table => print_stdout(&(crate::render::runtime_cache::gc_table(&rows, dry_run) + "\n"))?,
            }
        }
        RuntimeCommand::Bisect(a) => return bisect(*a),
    }
    Ok(ExitCode::Success)
}

/// `runtime bisect`: its flags turned once into its options, the findings on stdout (and as JSON
/// in `--out`).
fn bisect(a: ReleaseBisectArgs) -> Result<ExitCode> {
    let ReleaseBisectArgs {
        model,
        target,
        from,
        to,
        max_abs,
        no_layers,
        reference,
        inputs,
        exec,
        format,
        out,
    } = a;
    let [spec] = target.specs.as_slice() else {
        return Err(bad_flag(format!(
            "--target {target}: name one target without a release (qnn:sm8650, cpu): --from and --to give the releases"
        )));
    };
    if spec.release.is_some() {
        return Err(bad_flag(format!(
            "--target {target}: name it without a release: --from and --to give the releases"
        )));
    }
    if max_abs.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
        return Err(bad_flag("--max-abs must be a non-negative number"));
    }
    let options = ReleaseBisectOptions {
        audited: Audited {
            model,
            golden: golden_source(reference),
            inputs: input_options(inputs),
        },
        exec: exec_options(exec)?,
        target: spec.clone(),
        from: from.trim().to_string(),
        to: to.trim().to_string(),
        max_abs,
        layers: (!no_layers).then(LayerOptions::isolated_taps),
    };
    let files = findings_files(vec![("--out", out, None)]);
    let outputs = findings_outputs(&options, &files)?;
    let found = crate::commands::bisect::bisect(&options)?;
    emit_findings(&found, &files, outputs, |found, json| match format {
        Format::Json => json,
        Format::Table => crate::render::bisect::render(found),
    })?;
    Ok(ExitCode::Success)
}
