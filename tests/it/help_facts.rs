//! What the help says is what the binary does: every flag an error message asks for is in the
//! `-h` of the commands where that error can arise, and every exit code a help text promises is
//! the one a run that breaks (or keeps) the limit ends with.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::*;

/// Every command and subcommand with flags, as typed.
const COMMANDS: &[&str] = &[
    "compare",
    "layers",
    "explain-failure",
    "fingerprint",
    "triage",
    "matrix",
    "eval",
    "repro",
    "pipeline",
    "targets",
    "runtime list",
    "runtime install",
    "runtime path",
    "runtime gc",
    "runtime bisect",
    "golden create",
    "check-config",
    "merge",
    "sample-size",
    "plan",
    "render",
    "schema",
    "completions",
    "man",
];

/// What runs in the repository's root and exits.
fn run_in_repo(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = bin();
    cmd.current_dir(repo("")).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run npu-audit");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The help of `command` (`-h` or `--help`).
fn help(command: &str, flag: &str) -> String {
    let mut args: Vec<&str> = command.split(' ').filter(|w| !w.is_empty()).collect();
    args.push(flag);
    let out = bin().args(&args).output().expect("run npu-audit");
    assert_eq!(out.status.code(), Some(0), "{command} {flag}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The long flags a help text lists (`--flag` at the start of an option's line).
fn listed_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = match l.split_once(", --") {
                Some((short, rest)) if short.len() == 2 && short.starts_with('-') => rest,
                _ => l.strip_prefix("--")?,
            };
            Some(l.split([' ', '<']).next().unwrap_or("").to_string())
        })
        .filter(|f| !f.is_empty())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Flags errors ask for

/// What a message that names a flag after a demanding word (`needs --X`, `give --X`, `use --X`,
/// `add --X`, `pass --X`, `or --X`, `with --X`) means for the short help.
enum Asks {
    /// The error can arise in these commands (`*`: every command that takes the flag), and then
    /// `-h` must list the flag, unless the error presupposes a flag the user gave that `-h`
    /// does not list (they are reading `--help` already).
    Flag {
        commands: &'static [&'static str],
        presupposes: Option<&'static str>,
    },
    /// The flag is named but not asked for (why).
    NotAsked(&'static str),
}

use Asks::{Flag, NotAsked};

/// Every (source file, flag) the scan below finds, classified by hand. A new message that asks
/// for a flag fails the test until it is classified here; a row whose message is gone fails too.
const ASKED: &[(&str, &str, Asks)] = &[
    (
        "src/analyses/accuracy/task.rs",
        "class-axis",
        Flag {
            commands: &["eval", "matrix"],
            presupposes: None,
        },
    ),
    (
        "src/analyses/accuracy/task.rs",
        "classes",
        Flag {
            commands: &["eval", "matrix"],
            presupposes: None,
        },
    ),
    (
        "src/analyses/accuracy/task.rs",
        "output",
        Flag {
            commands: &["eval", "matrix"],
            presupposes: None,
        },
    ),
    (
        "src/cli/compare.rs",
        "steps",
        Flag {
            commands: &["compare"],
            presupposes: Some("stream"),
        },
    ),
    (
        "src/cli/compare.rs",
        "stream",
        Flag {
            commands: &["compare"],
            presupposes: Some("min-decision-agreement"),
        },
    ),
    (
        "src/cli/eval.rs",
        "decision",
        Flag {
            commands: &["eval", "matrix"],
            presupposes: None,
        },
    ),
    (
        "src/cli/eval.rs",
        "vocab",
        Flag {
            commands: &["eval", "matrix"],
            presupposes: None,
        },
    ),
    (
        "src/cli/eval.rs",
        "from",
        Flag {
            commands: &["sample-size"],
            presupposes: None,
        },
    ),
    (
        "src/cli/eval.rs",
        "out",
        Flag {
            commands: &["eval"],
            presupposes: None,
        },
    ),
    (
        "src/cli/generate.rs",
        "max-accuracy-drop",
        NotAsked("names the limits of the task the refused flag belongs to"),
    ),
    (
        "src/cli/generate.rs",
        "max-kld-mean",
        NotAsked("names the limits of the task the refused flag belongs to"),
    ),
    (
        "src/cli/triage.rs",
        "db",
        Flag {
            commands: &["triage"],
            presupposes: None,
        },
    ),
    (
        "src/cli/triage.rs",
        "no-db",
        Flag {
            commands: &["triage"],
            presupposes: None,
        },
    ),
    (
        "src/cli/triage.rs",
        "summary",
        Flag {
            commands: &["triage"],
            presupposes: None,
        },
    ),
    // A baseline report (from the policy file as well as the flag) of another host or threads.
    (
        "src/commands/compare/plan.rs",
        "allow-other-hosts",
        Flag {
            commands: &["compare", "layers"],
            presupposes: None,
        },
    ),
    (
        "src/commands/compare/plan.rs",
        "allow-other-threads",
        Flag {
            commands: &["compare", "layers"],
            presupposes: None,
        },
    ),
    (
        "src/commands/compare/plan.rs",
        "threads",
        Flag {
            commands: &["compare", "layers"],
            presupposes: None,
        },
    ),
    (
        "src/commands/compare/plan.rs",
        "input",
        Flag {
            commands: &["compare"],
            presupposes: Some("chunk"),
        },
    ),
    (
        "src/commands/compare/plan.rs",
        "layers",
        NotAsked("--stream cannot be combined with --layers"),
    ),
    (
        "src/commands/compare/reference.rs",
        "reference",
        Flag {
            commands: &["*"],
            presupposes: None,
        },
    ),
    (
        "src/data/device/qnn.rs",
        "inputs",
        Flag {
            commands: &["triage"],
            presupposes: None,
        },
    ),
    (
        "src/commands/eval/broken_layers.rs",
        "golden",
        NotAsked("give --reference with --golden: --golden was given"),
    ),
    (
        "src/commands/eval/broken_layers.rs",
        "reference",
        Flag {
            commands: &["eval"],
            presupposes: None,
        },
    ),
    (
        "src/commands/eval/mod.rs",
        "labels",
        Flag {
            commands: &["eval"],
            presupposes: None,
        },
    ),
    (
        "src/commands/eval/mod.rs",
        "max-accuracy-drop",
        Flag {
            commands: &["eval"],
            presupposes: None,
        },
    ),
    (
        "src/commands/eval/mod.rs",
        "min-accuracy",
        Flag {
            commands: &["eval"],
            presupposes: None,
        },
    ),
    (
        "src/execution/golden.rs",
        "force",
        Flag {
            commands: &["golden create"],
            presupposes: None,
        },
    ),
    (
        "src/data/inputs/mod.rs",
        "gen",
        Flag {
            commands: &["*"],
            presupposes: None,
        },
    ),
    (
        "src/data/inputs/mod.rs",
        "input",
        NotAsked("an input given twice names the flags it came from"),
    ),
    (
        "src/data/inputs/mod.rs",
        "input-shape",
        Flag {
            commands: &["*"],
            presupposes: None,
        },
    ),
    (
        "src/data/inputs/mod.rs",
        "inputs",
        Flag {
            commands: &["*"],
            presupposes: None,
        },
    ),
    (
        "src/data/inputs/sequence.rs",
        "input-shape",
        Flag {
            commands: &["compare"],
            presupposes: None,
        },
    ),
    (
        "src/commands/merge/compare.rs",
        "allow-other-hosts",
        Flag {
            commands: &["merge"],
            presupposes: None,
        },
    ),
    (
        "src/commands/merge/compare.rs",
        "allow-other-threads",
        Flag {
            commands: &["merge"],
            presupposes: None,
        },
    ),
    (
        "src/commands/merge/compare.rs",
        "out",
        NotAsked("names how the shards were run (compare --out)"),
    ),
    (
        "src/commands/merge/compare.rs",
        "outputs",
        Flag {
            commands: &["merge"],
            presupposes: None,
        },
    ),
    (
        "src/judge/policy/mod.rs",
        "baseline-report",
        Flag {
            commands: &["compare", "layers"],
            presupposes: None,
        },
    ),
    (
        "src/commands/repro/files.rs",
        "layer",
        Flag {
            commands: &["repro"],
            presupposes: None,
        },
    ),
    (
        "src/commands/repro/mod.rs",
        "reference",
        Flag {
            commands: &["repro"],
            presupposes: None,
        },
    ),
    (
        "src/commands/shard/mod.rs",
        "shard",
        Flag {
            commands: &["compare", "layers", "eval"],
            presupposes: Some("shard"),
        },
    ),
    (
        "src/commands/triage/reproduce.rs",
        "reference",
        Flag {
            commands: &["triage"],
            presupposes: None,
        },
    ),
    (
        "src/commands/triage/store.rs",
        "db",
        Flag {
            commands: &["triage"],
            presupposes: None,
        },
    ),
    (
        "src/commands/triage/store.rs",
        "no-db",
        Flag {
            commands: &["triage"],
            presupposes: None,
        },
    ),
];

/// Every (file, flag) whose string literals in `src/` (tests, comments and the help texts of
/// `src/cli/args.rs` and `src/cli/help.rs` aside) name a flag after a demanding word.
fn scan_asked_flags() -> BTreeSet<(String, String)> {
    let literal = regex::Regex::new(r#""((?:[^"\\]|\\.)*)""#).expect("regex");
    let asks =
        regex::Regex::new(r"\b(?:needs?|requires?|give|use|add|pass|or|with)\s+--([a-z][a-z0-9-]+)").expect("regex");
    let mut found = BTreeSet::new();
    let mut files = Vec::new();
    fn walk(dir: &Path, into: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, into);
            } else if p.extension().is_some_and(|x| x == "rs") {
                into.push(p);
            }
        }
    }
    walk(&repo("src"), &mut files);
    for path in files {
        let rel = path
            .strip_prefix(repo(""))
            .expect("in the repository")
            .display()
            .to_string();
        if rel == "src/cli/args.rs" || rel == "src/cli/help.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let code: String = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("'\"'", "")
            .replace("'\\\"'", "");
        for lit in literal.captures_iter(&code) {
            for flag in asks.captures_iter(&lit[1]) {
                found.insert((rel.clone(), flag[1].to_string()));
            }
        }
    }
    found
}

/// Every flag an error asks for is listed by `-h` of every command where the error can arise
/// (the table above says where; the scan of the sources keeps the table complete).
#[test]
fn every_flag_an_error_asks_for_is_in_the_short_help() {
    let scanned = scan_asked_flags();
    assert!(scanned.len() >= 30, "the scan found only {scanned:?}");
    let table: BTreeSet<(String, String)> = ASKED.iter().map(|(f, x, _)| (f.to_string(), x.to_string())).collect();
    let unclassified: Vec<_> = scanned.difference(&table).collect();
    let stale: Vec<_> = table.difference(&scanned).collect();
    assert!(
        unclassified.is_empty(),
        "messages that ask for a flag, not classified in ASKED: {unclassified:?}"
    );
    assert!(stale.is_empty(), "ASKED rows whose message is gone: {stale:?}");

    let mut helps: BTreeMap<&str, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    for c in COMMANDS {
        helps.insert(c, (listed_flags(&help(c, "-h")), listed_flags(&help(c, "--help"))));
    }
    let mut missing = Vec::new();
    for (file, flag, asks) in ASKED {
        let (commands, presupposes) = match asks {
            Flag { commands, presupposes } => (commands, presupposes),
            NotAsked(why) => {
                assert!(!why.is_empty(), "{file}: --{flag} needs a reason");
                continue;
            }
        };
        let commands: Vec<&str> = if commands == &["*"] {
            helps
                .iter()
                .filter(|(_, (_, long))| long.contains(*flag))
                .map(|(c, _)| *c)
                .collect()
        } else {
            commands.to_vec()
        };
        assert!(!commands.is_empty(), "{file}: --{flag} is no command's flag");
        for c in commands {
            let (short, long) = &helps[c];
            assert!(long.contains(*flag), "{file}: {c} --help has no --{flag}");
            let past_short_help = presupposes.is_some_and(|p| long.contains(p) && !short.contains(p));
            if !past_short_help && !short.contains(*flag) {
                missing.push(format!("{c} -h lacks --{flag} ({file} asks for it)"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The flags the eval steps of docs/eval.md use are in `eval -h`.
#[test]
fn eval_short_help_names_the_flags_its_documented_steps_use() {
    let short = listed_flags(&help("eval", "-h"));
    for flag in [
        "output",
        "margin",
        "explain",
        "shard",
        "until-decided",
        "max-accuracy-drop",
        "min-accuracy",
    ] {
        assert!(short.contains(flag), "eval -h lacks --{flag}");
    }
}

// ---------------------------------------------------------------------------------------------
// Exit codes promised by the help

const CNN_U8: &str = "fixtures/models/cnn_qdq_u8.onnx";
const CNN_FP32: &str = "fixtures/models/cnn_fp32.onnx";
const FALLBACK: &str = "fixtures/models/fallback_qdq_u8.onnx";

/// A silero stream of 4 steps on the CPU EP.
const STREAM: &[&str] = &[
    "compare",
    "fixtures/real/silero_vad_qdq_u8.onnx",
    "--reference",
    "fixtures/real/silero_vad_fp32.onnx",
    "-t",
    "cpu",
    "--stream",
    "stateN->state",
    "--chunk",
    "input=fixtures/inputs/speech_16k.npy:hop=512",
    "--steps",
    "4",
];

/// One run and the exit code the help says it ends with.
struct Case {
    args: Vec<String>,
    exit: i32,
}

fn case(base: &[&str], extra: &str, exit: i32) -> Case {
    let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    args.extend(extra.split_whitespace().map(str::to_string));
    Case { args, exit }
}

/// Runs breaking a limit (the claimed exit) and keeping it (0), for a gate flag of `compare`
/// and `layers`.
fn compare_cases(command: &str, flag: &str) -> Vec<Case> {
    let cnn = [command, CNN_U8, "--reference", CNN_FP32, "-t", "cpu", "-q"];
    let qnn = [command, CNN_U8, "--reference", CNN_FP32, "-t", "qnn:sm8650", "-q"];
    let fallback = [command, FALLBACK, "-t", "qnn:sm8650", "-q"];
    let mut stream: Vec<&str> = STREAM.to_vec();
    stream[0] = command;
    match flag {
        "min-sqnr" => vec![case(&cnn, "--min-sqnr 40", 1), case(&cnn, "--min-sqnr 20", 0)],
        "max-abs" => vec![case(&cnn, "--max-abs 1e-9", 1), case(&cnn, "--max-abs 1000", 0)],
        "min-top1" => vec![
            case(&cnn, "--samples 64 --min-top1 1", 1),
            case(&cnn, "--samples 64 --min-top1 0", 0),
        ],
        "require-bit-exact" => vec![
            case(&cnn, "--require-bit-exact", 1),
            case(&[command, CNN_FP32, "-t", "cpu:noopt", "-q"], "--require-bit-exact", 0),
        ],
        "max-fallback-nodes" => vec![
            case(&fallback, "--max-fallback-nodes 0", 1),
            case(&fallback, "--max-fallback-nodes 1000", 0),
        ],
        "max-partitions" => vec![case(&qnn, "--max-partitions 0", 1), case(&qnn, "--max-partitions 1", 0)],
        "fail-on-fallback" => vec![
            case(&fallback, "--fail-on-fallback", 1),
            case(&qnn, "--fail-on-fallback", 0),
        ],
        "max-layer-sqnr-loss" => vec![
            case(&cnn, "--layers all --max-layer-sqnr-loss 0", 1),
            case(&cnn, "--layers all --max-layer-sqnr-loss 1000", 0),
        ],
        "min-decision-agreement" => vec![
            // A stream without a decision does not measure agreement: the limit fails.
            case(&stream, "--min-decision-agreement 0.5", 1),
            case(&stream, "--decision output>0.5 --min-decision-agreement 0", 0),
        ],
        "max-divergence-step" => vec![
            case(&stream, "--divergence-sqnr 1000 --max-divergence-step 1", 1),
            case(&stream, "--divergence-sqnr 1000 --max-divergence-step 0", 0),
        ],
        _ => Vec::new(),
    }
}

/// The runs of an exit claim of `command`'s flag (`""`: the command's own text); none when the
/// claim is not known (the test then fails).
fn cases(command: &str, flag: &str) -> Vec<Case> {
    let eval = [
        "eval",
        CNN_U8,
        "--reference",
        CNN_FP32,
        "--task",
        "agree",
        "--output",
        "probs",
        "-t",
        "cpu",
        "-q",
        "--dataset",
    ];
    let matrix = [
        "matrix",
        "--variant",
        "int8=fixtures/models/cnn_qdq_u8.onnx",
        "--reference",
        CNN_FP32,
        "-q",
    ];
    let pipeline = [
        "pipeline",
        "fixtures/real/ppocr_cls_pipeline.toml",
        "-t",
        "cpu",
        "--inputs",
        "fixtures/inputs/ppocr_seed3.npz",
        "-q",
    ];
    match (command, flag) {
        ("compare" | "layers", _) => compare_cases(command, flag),
        ("eval", "min-accuracy") => vec![
            case(&eval, "{SET} --min-accuracy 0.99", 1),
            case(&eval, "{SET} --min-accuracy 0", 0),
        ],
        ("eval", "max-accuracy-drop") => vec![
            case(&eval, "{SET} --max-accuracy-drop 1", 1),
            case(&eval, "{SET} --max-accuracy-drop 100", 0),
        ],
        // matrix: int8 on the CPU EP measures 32.50 dB, on cpu:noopt 31.16 dB.
        ("matrix", "min-sqnr") => vec![
            case(&matrix, "-t cpu --min-sqnr 40", 1),
            // Met on cpu only: cpu:noopt's recommendation runs on the CPU, and the gate fails.
            case(&matrix, "-t cpu -t cpu:noopt --min-sqnr 32", 1),
            case(&matrix, "-t cpu -t cpu:noopt --min-sqnr 30", 0),
        ],
        ("matrix", "max-abs") => vec![
            case(&matrix, "-t cpu --max-abs 1e-9", 1),
            case(&matrix, "-t cpu --max-abs 1000", 0),
        ],
        ("matrix", "min-top1") => vec![
            case(&matrix, "-t cpu --samples 64 --min-top1 1", 1),
            case(&matrix, "-t cpu --samples 64 --min-top1 0", 0),
        ],
        ("matrix", "require-bit-exact") => vec![
            case(&matrix, "-t cpu --require-bit-exact", 1),
            case(
                &[
                    "matrix",
                    "--variant",
                    "fp32=fixtures/models/cnn_fp32.onnx",
                    "--reference",
                    CNN_FP32,
                    "-q",
                ],
                "-t cpu:noopt --require-bit-exact",
                0,
            ),
        ],
        ("matrix", "max-fallback-nodes") => vec![
            case(
                &[
                    "matrix",
                    "--variant",
                    "u8=fixtures/models/fallback_qdq_u8.onnx",
                    "--reference",
                    FALLBACK,
                    "-q",
                ],
                "-t qnn:sm8650 --max-fallback-nodes 0",
                1,
            ),
            case(&matrix, "-t qnn:sm8650 --max-fallback-nodes 0", 0),
        ],
        ("matrix", "max-partitions") => vec![
            case(&matrix, "-t qnn:sm8650 --max-partitions 0", 1),
            case(&matrix, "-t qnn:sm8650 --max-partitions 1", 0),
        ],
        ("matrix", "fail-on-fallback") => vec![
            case(
                &[
                    "matrix",
                    "--variant",
                    "u8=fixtures/models/fallback_qdq_u8.onnx",
                    "--reference",
                    FALLBACK,
                    "-q",
                ],
                "-t qnn:sm8650 --fail-on-fallback",
                1,
            ),
            case(&matrix, "-t qnn:sm8650 --fail-on-fallback", 0),
        ],
        ("matrix", "min-accuracy") => vec![
            case(
                &matrix,
                "-t cpu --task agree --output probs --dataset {SET} --min-accuracy 0.99",
                1,
            ),
            case(
                &matrix,
                "-t cpu --task agree --output probs --dataset {SET} --min-accuracy 0",
                0,
            ),
        ],
        ("matrix", "max-accuracy-drop") => vec![
            case(
                &matrix,
                "-t cpu --task agree --output probs --dataset {SET} --max-accuracy-drop 1",
                1,
            ),
            case(
                &matrix,
                "-t cpu --task agree --output probs --dataset {SET} --max-accuracy-drop 100",
                0,
            ),
        ],
        ("pipeline", "min-sqnr") => vec![
            case(&pipeline, "--min-sqnr 1000", 1),
            case(&pipeline, "--min-sqnr=-100", 0),
        ],
        _ => Vec::new(),
    }
}

/// Every `(exit N)` a command's `--help` states, by the flag whose text states it.
fn exit_claims(command: &str) -> Vec<(String, i32)> {
    let text = help(command, "--help");
    let claim = regex::Regex::new(r"\bexit (\d+)\b").expect("regex");
    let mut flag = String::new();
    let mut claims = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('-') {
            flag = listed_flags(t).into_iter().next().unwrap_or_default();
        }
        if let Some(c) = claim.captures(line) {
            if line.starts_with("Exit codes:") {
                continue;
            }
            claims.push((flag.clone(), c[1].parse().expect("a number")));
        }
    }
    claims.dedup();
    claims
}

/// Each exit code a help text promises for a flag is the code a run that breaks the limit ends
/// with, and a run within the limit exits 0.
#[test]
fn every_exit_code_the_help_promises_is_what_the_binary_returns() {
    let set = tempdir();
    for k in 0..2 {
        std::fs::copy(
            repo("fixtures/inputs/cnn_seed7.npz"),
            set.path().join(format!("s{k}.npz")),
        )
        .expect("copy");
    }
    let set_path = set.path().to_str().expect("utf-8").to_string();
    let mut failures = Vec::new();
    let mut checked = 0;
    for c in COMMANDS {
        for (flag, exit) in exit_claims(c) {
            let runs = cases(c, &flag);
            if runs.is_empty() {
                failures.push(format!(
                    "{c} --{flag}: the help promises exit {exit}, and no run here checks it"
                ));
                continue;
            }
            assert!(
                runs.iter().any(|r| r.exit == exit),
                "{c} --{flag}: no run breaks the limit"
            );
            for r in runs {
                let args: Vec<String> = r.args.iter().map(|a| a.replace("{SET}", &set_path)).collect();
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let (code, stderr) = run_in_repo(&args, &[]);
                checked += 1;
                if code != r.exit {
                    failures.push(format!(
                        "{args:?} exited {code}, the help promises {}:\n{stderr}",
                        r.exit
                    ));
                }
            }
        }
    }
    assert!(checked >= 40, "only {checked} runs");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The exit codes the top-level `--help` lists, each from a run that ends that way.
#[test]
fn every_exit_code_of_the_top_level_help_is_returned() {
    let top = help("", "--help");
    let line = top
        .lines()
        .skip_while(|l| !l.starts_with("Exit codes:"))
        .collect::<Vec<_>>()
        .join(" ");
    let codes: BTreeSet<i32> = regex::Regex::new(r"(?:;|:) (\d+) ")
        .expect("regex")
        .captures_iter(&line)
        .map(|c| c[1].parse().expect("a number"))
        .collect();
    assert_eq!(codes, BTreeSet::from([0, 1, 2, 3, 4, 130]), "{line}");
    let cnn = ["compare", CNN_U8, "--reference", CNN_FP32, "-t", "cpu", "-q"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { [&cnn[..], extra].concat() };
    let empty = tempdir();
    let cache = empty.path().to_str().expect("utf-8");
    for (exit, args, env) in [
        (0, with(&["--min-sqnr", "20"]), vec![]),
        (1, with(&["--min-sqnr", "40"]), vec![]),
        (2, with(&["--min-sqnr", "lots"]), vec![]),
        // DirectML needs Windows: a required target that cannot run.
        (3, vec!["compare", CNN_U8, "-t", "dml", "-q"], vec![]),
        // No runtime cached and no Python to fetch one.
        (
            4,
            with(&[]),
            vec![("NPU_AUDIT_CACHE", cache), ("NPU_AUDIT_PYTHON", "/nonexistent/python3")],
        ),
    ] {
        let (code, stderr) = run_in_repo(&args, &env);
        assert_eq!(code, exit, "{args:?}: {stderr}");
    }
    // 130: a run stopped by Ctrl-C while its worker hangs.
    let tmp = tempdir();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("npu-audit"))
        .current_dir(repo(""))
        .env("TMPDIR", tmp.path())
        .env("NPU_AUDIT_FAULT_INJECT", "cpu=hang")
        .args(["compare", CNN_U8, "-t", "cpu", "--no-baseline", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while work_dirs(tmp.path()).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no work directory appeared");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(1000));
    // SAFETY: kill(2) on the child process this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    assert_eq!(child.wait().expect("wait").code(), Some(130));
}
