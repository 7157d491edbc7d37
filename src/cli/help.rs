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
    "gen",
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

/// Flags one command shows with `-h` besides [`COMMON_FLAGS`]: those its errors ask for and its
/// documented steps use (`tests/it/help_facts.rs` ties every flag an error names to `-h`).
const COMMAND_FLAGS: &[(&str, &[&str])] = &[
    (
        "compare",
        &["baseline-report", "threads", "allow-other-threads", "allow-other-hosts"],
    ),
    (
        "layers",
        &["baseline-report", "threads", "allow-other-threads", "allow-other-hosts"],
    ),
    (
        "eval",
        &["class-axis", "classes", "min-accuracy", "margin", "explain", "shard"],
    ),
    ("matrix", &["class-axis", "classes", "min-accuracy"]),
    ("create", &["force"]),
];

/// `matrix`'s limits choose the variant per target; its exit code judges the choice, not each
/// cell, so their help says what they do there (the flags `matrix` refuses are hidden).
const MATRIX_LIMITS: &[(&str, &str)] = &[
    (
        "min_sqnr",
        "A cell meets the policy with every output's SQNR at least DB",
    ),
    (
        "max_abs",
        "A cell meets the policy with every output's absolute error at most X",
    ),
    (
        "min_top1",
        "A cell meets the policy when every output with a class axis agrees with the golden run's \
         top-1 class on at least this fraction of rows",
    ),
    (
        "require_bit_exact",
        "A cell meets the policy when bit-identical to the golden run",
    ),
    (
        "max_fallback_nodes",
        "A cell on a non-CPU target meets the policy with at most N compute nodes on the CPU EP",
    ),
    (
        "max_partitions",
        "A cell on a non-CPU target meets the policy with at most N partitions",
    ),
    (
        "fail_on_fallback",
        "A cell on a non-CPU target meets the policy with no compute node on the CPU EP",
    ),
    (
        "min_accuracy",
        "A cell meets the policy when its accuracy is shown at least FRACTION",
    ),
    (
        "max_accuracy_drop",
        "A cell meets the policy when its drop is shown within POINTS",
    ),
];

/// What `matrix`'s exit code says, after each limit's help.
const MATRIX_EXIT: &str = "; exit 1 when a target has no variant within";

/// The gate flags `matrix` refuses (exit 2) or that judge what it does not run (a stream).
const MATRIX_REFUSED: &[&str] = &[
    "baseline_report",
    "max_layer_sqnr_loss",
    "min_decision_agreement",
    "max_divergence_step",
];

/// The flags of a stream, which `layers` refuses (a stream is not audited layer by layer): hidden
/// from its help, so that no limit it lists is one it cannot judge.
const LAYERS_REFUSED: &[&str] = &[
    "stream",
    "steps",
    "chunk",
    "sequence",
    "decision",
    "divergence_sqnr",
    "teacher_forcing",
    "min_decision_agreement",
    "max_divergence_step",
];

/// Commands with at most this many flags show them all with `-h` too.
const SHORT_ENOUGH: usize = 16;

/// The flags a generation spec's `-h` shows beside `eval`'s: what its documented examples use.
const GENERATION_FLAGS: &[&str] = &["no-baseline", "limit"];

/// The command line of `eval SPEC.toml`, with the short help trimmed as every command's is.
pub fn generation_command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = trim_short_help(hide_uncommon_globals(super::args::GenerationCli::command()));
    for long in GENERATION_FLAGS {
        let id = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .map(|a| a.get_id().to_string());
        if let Some(id) = id {
            cmd = cmd.mut_arg(id, |a| a.hide_short_help(false));
        }
    }
    cmd
}

/// The command line the tool parses: the derived one, with the short help trimmed.
pub fn command() -> clap::Command {
    let cmd = hide_uncommon_globals(Cli::command())
        .mut_subcommand("matrix", matrix_limits)
        .mut_subcommand("layers", |c| hide(c, LAYERS_REFUSED));
    trim_subcommands(cmd)
}

/// `matrix`'s limits as [`MATRIX_LIMITS`] says, and the flags it refuses hidden.
fn matrix_limits(mut cmd: clap::Command) -> clap::Command {
    for (id, help) in MATRIX_LIMITS {
        let long = cmd
            .get_arguments()
            .find(|a| a.get_id() == *id)
            .and_then(|a| a.get_long_help().map(|h| h.to_string()));
        cmd = cmd.mut_arg(*id, |a| {
            let a = a.help(format!("{help}{MATRIX_EXIT}"));
            match long {
                Some(long) => a.long_help(format!("{help}{MATRIX_EXIT}.\n\n{}", second_paragraphs(&long))),
                None => a,
            }
        });
    }
    hide(cmd, MATRIX_REFUSED)
}

/// `cmd` with the flags `ids` hidden from both helps (still parsed, and refused by the command).
fn hide(mut cmd: clap::Command, ids: &[&str]) -> clap::Command {
    for id in ids {
        cmd = cmd.mut_arg(*id, |a| a.hide(true));
    }
    cmd
}

/// A long help without its first paragraph (which the short help replaces).
fn second_paragraphs(long: &str) -> &str {
    long.split_once("\n\n").map_or("", |(_, rest)| rest)
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
    let own: &[&str] = COMMAND_FLAGS
        .iter()
        .find(|(name, _)| *name == cmd.get_name())
        .map_or(&[], |(_, flags)| flags);
    for id in &flags {
        let common = cmd
            .get_arguments()
            .find(|a| a.get_id() == id.as_str())
            .and_then(|a| a.get_long())
            .is_some_and(|long| COMMON_FLAGS.contains(&long) || own.contains(&long));
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
