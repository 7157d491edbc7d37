//! The commands that audit no model against a golden run: `fingerprint`, `explain-failure`,
//! `golden create`, `check-config`, `targets`, and the tool's own documents (`man`, `schema`,
//! `completions`).

use std::path::Path;

use anyhow::Result;
use clap::CommandFactory;

use super::args::{CheckConfigArgs, Cli, ExplainArgs, FingerprintArgs, Format, GoldenCommand, SchemaKind, TargetsArgs};
use super::shared::{
    emit_findings, exec_options, find_policy, findings_files, findings_outputs, input_options, print_json,
    print_stdout, runtime_choice,
};
use crate::analyses::fingerprint::{FingerprintCommand, FingerprintOptions};
use crate::commands::compare::golden::{run_golden_create, GoldenOptions};
use crate::commands::explain_failure::ExplainOptions;
use crate::data::target::distinct;
use crate::foundation::error::{bad_flag, bad_output, bad_report, ExitCode};
use crate::foundation::userfile::{is_stdio, InputFiles, Reads};
use crate::judge::policy::{Policy, Thresholds, DEFAULT_FILE as DEFAULT_POLICY_FILE};
use crate::report::json;

/// `check-config`: parses and checks the policy (and its previous report), then prints the
/// limits each target gets.
pub fn check_config(a: CheckConfigArgs) -> Result<ExitCode> {
    let CheckConfigArgs { file, targets } = a;
    let file = match file {
        Some(f) => f,
        None => {
            let here = std::env::current_dir().map_err(|e| bad_flag(format!("no current directory: {e}")))?;
            find_policy(&here).ok_or_else(|| bad_flag(no_policy_found(&here)))?
        }
    };
    if !is_stdio(&file) && !file.is_file() {
        let what = if file.is_dir() {
            "is a directory, not a policy file"
        } else {
            "no such file"
        };
        return Err(bad_flag(format!("{}: {what}", file.display())));
    }
    let policy = Policy::load(&file)?.with_flags(&Thresholds::default(), &[], None)?;
    if let Some((path, at)) = &policy.baseline_report {
        json::read(path).map_err(|e| bad_report(format!("{at}: previous report {e:#}")))?;
    }
    let wanted = if targets.is_empty() { &policy.targets } else { &targets };
    let ids: Vec<String> = if wanted.is_empty() {
        crate::data::target::all_known().into_iter().map(|s| s.id).collect()
    } else {
        distinct(wanted).into_iter().map(|s| s.id).collect()
    };
    let shown = crate::foundation::userfile::shown(&file);
    print_stdout(&format!("{shown}: valid\n{}", policy.describe(&ids)))?;
    Ok(ExitCode::Success)
}

/// Why `check-config` without FILE has nothing to check: where it looked for `npu-audit.toml`
/// (as `compare` does: the current directory, then its parents up to the repository's root) and
/// how to name or write one.
fn no_policy_found(here: &Path) -> String {
    let looked = match here.ancestors().find(|d| d.join(".git").exists()) {
        Some(root) if root != here => format!(
            "in {} or its parents up to the repository's root {}",
            here.display(),
            root.display()
        ),
        Some(_) => format!("in {} (the repository's root)", here.display()),
        None => format!(
            "in {} (outside a repository only the current directory is looked at)",
            here.display()
        ),
    };
    format!(
        "no policy file: no {DEFAULT_POLICY_FILE} {looked}, and NPU_AUDIT_CONFIG is not set; \
         name one (`npu-audit check-config FILE`, `-` for stdin) or write one as docs/policy.md describes"
    )
}

impl Reads for FingerprintCommand {
    fn declare(&self, set: &mut InputFiles) {
        let FingerprintCommand {
            targets: _,
            probes: _,
            options: _,
            exec,
        } = self;
        set.with(exec);
    }
}

/// `fingerprint`: every target's arithmetic measured with probe models (or read from the cache).
pub fn fingerprint(a: FingerprintArgs) -> Result<ExitCode> {
    let FingerprintArgs {
        targets,
        probes,
        repeat,
        refresh,
        no_cache,
        format,
        out,
        exec,
    } = a;
    let command = FingerprintCommand {
        targets: (!targets.is_empty()).then(|| distinct(&targets)),
        probes,
        options: FingerprintOptions {
            repeat: repeat as usize,
            refresh,
            use_cache: !no_cache,
        },
        exec: exec_options(exec)?,
    };
    let files = findings_files(vec![("--out", out, None)]);
    let outputs = findings_outputs(&command, &files)?;
    let report = crate::analyses::fingerprint::run_command(&command)?;
    crate::foundation::interrupt::check()?;
    emit_findings(&report, &files, outputs, |r, json| match format {
        Format::Json => json,
        Format::Table => crate::render::fingerprint::render(r),
    })?;
    Ok(ExitCode::Success)
}

/// `explain-failure`: the node that makes each target refuse the model.
pub fn explain(a: ExplainArgs) -> Result<ExitCode> {
    let ExplainArgs {
        model,
        targets,
        inputs,
        format,
        exec,
    } = a;
    let found = crate::commands::explain_failure::run(&ExplainOptions {
        model,
        targets: distinct(&targets),
        inputs: input_options(inputs),
        exec: exec_options(exec)?,
    })?;
    crate::foundation::interrupt::check()?;
    match format {
        Format::Json => print_json(&found)?,
        Format::Table => print_stdout(&crate::render::explain_failure::render(&found))?,
    }
    Ok(ExitCode::Success)
}

/// `golden create`: the reference model run once and stored.
pub fn golden(command: GoldenCommand) -> Result<ExitCode> {
    let GoldenCommand::Create {
        model,
        out,
        force,
        layers,
        inputs,
        exec,
    } = command;
    let dir = run_golden_create(&GoldenOptions {
        model,
        out,
        force,
        layers,
        inputs: input_options(inputs),
        exec: exec_options(exec)?,
    })?;
    crate::foundation::console::note(format!("golden run written to {}", dir.display()));
    Ok(ExitCode::Success)
}

/// `targets`: every target and whether this machine can run it.
pub fn targets(a: TargetsArgs) -> Result<ExitCode> {
    let TargetsArgs {
        format,
        runtime,
        runtime_env,
    } = a;
    let rows = crate::commands::availability::availability(&runtime_choice(runtime, &runtime_env))?;
    match format {
        Format::Json => print_json(&rows)?,
        Format::Table => print_stdout(&(crate::render::targets::targets_table(&rows) + "\n"))?,
    }
    Ok(ExitCode::Success)
}

/// `man`: the page of the whole tool on stdout, or one page per command into a directory.
pub fn man(dir: Option<&Path>) -> Result<ExitCode> {
    let cmd = Cli::command();
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| bad_output(format!("--dir {}: {e}", dir.display())))?;
            clap_mangen::generate_to(cmd, dir).map_err(|e| bad_output(format!("--dir {}: {e}", dir.display())))?;
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page)?;
            print_stdout(&String::from_utf8_lossy(&page))?;
        }
    }
    Ok(ExitCode::Success)
}

/// The command line as users see it: without hidden subcommands (the internal `__worker`),
/// which completion generators would otherwise offer.
fn visible_command() -> clap::Command {
    let root = Cli::command();
    let visible: Vec<clap::Command> = root.get_subcommands().filter(|c| !c.is_hide_set()).cloned().collect();
    let mut cmd = clap::Command::new("npu-audit")
        .args(root.get_arguments().cloned())
        .subcommands(visible);
    if let Some(about) = root.get_about() {
        cmd = cmd.about(about.clone());
    }
    if root.get_version().is_some() {
        cmd = cmd.version(env!("CARGO_PKG_VERSION"));
    }
    cmd
}

/// `completions`: the shell's completion script, for the commands users type.
pub fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut visible_command(), "npu-audit", &mut script);
    print_stdout(&String::from_utf8_lossy(&script))?;
    Ok(ExitCode::Success)
}

/// `schema`: the JSON Schema of one of the tool's outputs.
pub fn schema(kind: SchemaKind) -> Result<ExitCode> {
    use crate::report::schema::{schema_text, Contract};
    print_stdout(&schema_text(match kind {
        SchemaKind::Report => Contract::Compare,
        SchemaKind::Triage => Contract::Triage,
        SchemaKind::Matrix => Contract::Matrix,
        SchemaKind::Pipeline => Contract::Pipeline,
        SchemaKind::Eval => Contract::Eval,
        SchemaKind::Repro => Contract::Repro,
        SchemaKind::Generation => Contract::Generation,
    }))?;
    Ok(ExitCode::Success)
}
