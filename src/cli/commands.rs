//! The dispatch: the options every command takes applied, then the one command asked for.

use anyhow::Result;

use super::args::{ColorChoice, Command, GlobalArgs};
use crate::foundation::console::Verbosity;
use crate::foundation::error::ExitCode;

/// Applies the options every command takes: verbosity, colour, the cache and the Python used.
pub fn configure(g: &GlobalArgs) {
    crate::foundation::console::set(match (g.quiet, g.verbose) {
        (true, _) => Verbosity::Quiet,
        (_, true) => Verbosity::Verbose,
        _ => Verbosity::Normal,
    });
    anstream::ColorChoice::write_global(match g.color {
        ColorChoice::Auto => anstream::ColorChoice::Auto,
        ColorChoice::Always => anstream::ColorChoice::Always,
        ColorChoice::Never => anstream::ColorChoice::Never,
    });
    crate::execution::runtime::configure(crate::execution::runtime::Settings {
        cache_dir: g.cache_dir.clone(),
        python: g.python.clone(),
    });
}

/// Runs one parsed command.
pub fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Compare(a) => super::compare::run(*a, false),
        Command::Layers(a) => super::compare::run(*a, true),
        Command::ExplainFailure(a) => super::tools::explain(a),
        Command::Fingerprint(a) => super::tools::fingerprint(a),
        Command::CheckConfig(a) => super::tools::check_config(a),
        Command::Merge(a) => super::reports::merge(a),
        Command::Plan(a) => super::plan::run(a),
        Command::SampleSize(a) => super::eval::sample_size(a),
        Command::Render(a) => super::reports::render(a),
        Command::Targets(a) => super::tools::targets(a),
        Command::Runtime(c) => super::runtime::run(c),
        Command::Triage(a) => super::triage::run(*a),
        Command::Matrix(a) => super::matrix::run(*a),
        Command::Pipeline(a) => super::pipeline::run(*a),
        Command::Eval(a) => super::eval::run(*a),
        Command::Repro(a) => super::repro::run(*a),
        Command::Golden(c) => super::tools::golden(c),
        Command::Completions { shell } => super::tools::completions(shell),
        Command::Man { dir } => super::tools::man(dir.as_deref()),
        Command::Schema { kind } => super::tools::schema(kind),
        // Run by `main` before any command (it never reaches the dispatch).
        Command::Worker { job: _, serve: _ } => Ok(ExitCode::Success),
    }
}
