//! The command line: argument definitions ([`args`]), each command's arguments turned once into
//! its typed options (which declare every file the command reads) and run (`compare`, `matrix`,
//! `triage`, `pipeline`, `runtime`, `reports`, `tools`, over the flag groups and the output guard
//! of `shared`), the dispatch ([`commands`]), and [`main`], which maps every outcome to a
//! documented exit code.

pub mod args;
pub mod commands;
mod compare;
mod eval;
mod generate;
mod help;
mod matrix;
mod pipeline;
mod plan;
mod reports;
mod repro;
mod runtime;
mod shared;
mod tools;
mod triage;

use clap::FromArgMatches;

use crate::foundation::error::{exit_code_of, one_line, ExitCode};
use args::{Cli, Command};

/// The whole program: parses the command line, runs the command (or a worker), prints one line
/// per error, and returns the process exit code.
pub fn main() -> i32 {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if generate::is_spec_eval(&argv) {
        return match generate::parse(&argv) {
            Ok(g) => run_command(&g.global, || generate::run(g.args)),
            Err(e) => report_cli_error(e, Some(GENERATION_FLAGS)),
        };
    }
    let parsed = help::command()
        .try_get_matches_from(&argv)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => return report_cli_error(e, None),
    };
    if let Command::Worker { job, serve } = &cli.command {
        return crate::execution::exec::child::run(job, *serve);
    }
    run_command(&cli.global.clone(), || commands::run(cli.command))
}

/// What a flag a generation spec does not take is told: where its flags are listed.
const GENERATION_FLAGS: &str =
    "a generation spec takes the flags `npu-audit eval SPEC.toml --help` lists (docs/generation.md)";

/// Runs a parsed command with the global settings, Ctrl-C handled and one line per error, and
/// returns the process exit code.
fn run_command(global: &args::GlobalArgs, run: impl FnOnce() -> anyhow::Result<ExitCode>) -> i32 {
    commands::configure(global);
    crate::foundation::console::start_progress_lines();
    crate::foundation::interrupt::install();
    let code = match run() {
        Ok(code) => code,
        // Workers killed by the interruption make their runs fail on the way out: the
        // interruption, not those failures, is why the command ended.
        Err(_) if crate::foundation::interrupt::stopping() => {
            crate::foundation::console::error("interrupted");
            ExitCode::Interrupted
        }
        Err(e) => {
            crate::foundation::console::error(&one_line(&e));
            exit_code_of(&e)
        }
    };
    code as i32
}

/// Prints a command-line error as one line (help and version requests as clap prints them), with
/// `hint` after an unknown flag, and returns the exit code.
fn report_cli_error(e: clap::Error, hint: Option<&str>) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::Usage as i32
        }
        _ => {
            // clap's message spans lines (the error, the expected values, a usage block); keep
            // everything before the usage block, on one line.
            let text = e.render().to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty() && (hint.is_none() || !l.starts_with("tip:")))
                .collect();
            let message = message.join(" ");
            let hint = match hint {
                Some(h) if matches!(e.kind(), ErrorKind::UnknownArgument | ErrorKind::InvalidValue) => format!("; {h}"),
                _ => " (see --help)".into(),
            };
            crate::foundation::console::error(&format!("{}{hint}", message.trim_start_matches("error: ")));
            ExitCode::Usage as i32
        }
    }
}
