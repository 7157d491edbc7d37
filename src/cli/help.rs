//! The short help: `-h` lists the flags most runs need, so it fits a screen; `--help` lists every
//! flag under its heading. One list of common flags for every command, rather than an attribute
//! on each of the ~70 flags, so what `-h` shows is decided in one place.

use clap::CommandFactory;

use super::args::Cli;

/// Long flags shown by `-h` (a command shows those it has). Positional arguments are always
/// shown.
const COMMON_FLAGS: &[&str] = &[
    // where the golden run comes from, what runs, on what
    "reference",
    "golden",
    "target",
    "allow-failure",
    "inputs",
    "input-shape",
    // the gate and the reports
    "min-sqnr",
    "config",
    "format",
    "out",
    "markdown",
    "html",
    // what else is measured
    "layers",
    // eval and matrix (and the flags a task requires)
    "dataset",
    "task",
    "output",
    "labels",
    "decision",
    "vocab",
    "dispatch",
    "max-accuracy-drop",
    "until-decided",
    "variant",
    "search",
    // triage
    "db",
    "no-db",
    "summary",
    // repro and fingerprint
    "against",
    "layer",
    "probe",
    // how it runs
    "jobs",
    "timeout",
    "quiet",
    "verbose",
    "help",
    "version",
];

/// Commands with at most this many flags show them all with `-h` too.
const SHORT_ENOUGH: usize = 16;

/// The command line the tool parses: the derived one, with the short help trimmed.
pub fn command() -> clap::Command {
    trim_subcommands(hide_uncommon_globals(Cli::command()))
}

/// [`trim_short_help`] on every subcommand of `cmd`, theirs included (`runtime bisect`).
fn trim_subcommands(mut cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd.get_subcommands().map(|c| c.get_name().to_string()).collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |c| trim_subcommands(trim_short_help(c)));
    }
    cmd
}

/// Hides the global flags outside [`COMMON_FLAGS`] from every command's `-h`; done on the root,
/// before clap copies them into each command.
fn hide_uncommon_globals(mut cmd: clap::Command) -> clap::Command {
    let uncommon: Vec<String> = cmd
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|l| !COMMON_FLAGS.contains(&l)))
        .map(|a| a.get_id().to_string())
        .collect();
    for id in uncommon {
        cmd = cmd.mut_arg(id, |a| a.hide_short_help(true));
    }
    cmd
}

/// Hides from `-h` every flag of `cmd` outside [`COMMON_FLAGS`] when it has many, and says so.
fn trim_short_help(cmd: clap::Command) -> clap::Command {
    let flags: Vec<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .map(|a| a.get_id().to_string())
        .collect();
    if flags.len() <= SHORT_ENOUGH {
        return cmd;
    }
    let mut hidden = 0;
    let mut cmd = cmd;
    for id in &flags {
        let common = cmd
            .get_arguments()
            .find(|a| a.get_id() == id.as_str())
            .and_then(|a| a.get_long())
            .is_some_and(|long| COMMON_FLAGS.contains(&long));
        if !common {
            hidden += 1;
            cmd = cmd.mut_arg(id, |a| a.hide_short_help(true));
        }
    }
    let note = format!("-h shows the common flags; --help shows every flag ({hidden} more), under its heading.");
    let long = cmd.get_after_long_help().or(cmd.get_after_help()).cloned();
    let short = match cmd.get_after_help() {
        Some(after) => format!("{note}\n\n{after}"),
        None => note,
    };
    let cmd = cmd.after_help(short);
    match long {
        Some(long) => cmd.after_long_help(long),
        None => cmd.after_long_help(""),
    }
}
