//! The command line behaves as users of cargo, ripgrep and Polygraphy expect: help grouped
//! under headings with every environment variable shown, completions and a man page, `--color`,
//! `-q`/`-v`, `-` for standard input and output, and the policy file found upward to the
//! repository root or through `NPU_AUDIT_CONFIG`.

use crate::common;

use common::{bin, cnn, cnn_fp32, repo, tempdir};

fn stdout_of(args: &[&str]) -> String {
    let out = bin().args(args).output().expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn help_is_grouped_and_names_every_environment_variable() {
    let help = stdout_of(&["compare", "--help"]);
    for heading in [
        "Reference:",
        "Targets:",
        "Inputs:",
        "Gate:",
        "Reports:",
        "Layers:",
        "Execution:",
        "Global:",
    ] {
        assert!(help.contains(heading), "no {heading} heading in compare --help");
    }
    for var in [
        "NPU_AUDIT_CONFIG",
        "NPU_AUDIT_CACHE",
        "NPU_AUDIT_PYTHON",
        "NPU_AUDIT_RUNTIME_CPU",
        "NPU_AUDIT_RUNTIME_QNN",
        "NPU_AUDIT_RUNTIME_OPENVINO",
        "NPU_AUDIT_RUNTIME_DIRECTML",
        "NPU_AUDIT_RUNTIME_GPU",
    ] {
        assert!(
            help.contains(&format!("[env: {var}")),
            "{var} is not shown in compare --help"
        );
    }
    // `layers` takes compare's flags, but for those of a stream, which it refuses.
    let layers = stdout_of(&["layers", "--help"]);
    let flags = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| {
                l.trim_start()
                    .strip_prefix("--")
                    .map(|f| f.split([' ', '<']).next().unwrap_or("").to_string())
            })
            .collect()
    };
    let stream = [
        "stream",
        "steps",
        "chunk",
        "sequence",
        "decision",
        "divergence-sqnr",
        "teacher-forcing",
        "min-decision-agreement",
        "max-divergence-step",
    ];
    let compare_flags: Vec<String> = flags(&help)
        .into_iter()
        .filter(|f| !stream.contains(&f.as_str()))
        .collect();
    assert_eq!(compare_flags, flags(&layers));
    let (code, _, stderr) = {
        let out = bin()
            .args([
                "layers",
                repo("fixtures/models/cnn_qdq_u8.onnx").to_str().expect("utf-8"),
                "--stream",
                "a->b",
            ])
            .output()
            .expect("run");
        (out.status.code(), (), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    assert_eq!(code, Some(2), "layers --stream is refused: {stderr}");
}

/// `-h` fits a screen (at most 60 lines) for every command, says that `--help` has more, and
/// lists every flag `-h` shows again in `--help`; the internal worker is never offered.
#[test]
fn short_help_fits_a_screen_and_long_help_has_every_flag() {
    // `--flag` at the start of a help line, after a short flag (`-t, --target`) or alone.
    let flag_names = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| {
                let l = l.trim_start();
                let l = match l.split_once(", --") {
                    Some((short, rest)) if short.len() == 2 && short.starts_with('-') => rest,
                    _ => l.strip_prefix("--")?,
                };
                Some(l.split([' ', '<']).next().unwrap_or("").to_string())
            })
            .collect()
    };
    for cmd in [
        "compare",
        "layers",
        "eval",
        "eval spec.toml",
        "matrix",
        "triage",
        "repro",
        "fingerprint",
        "pipeline",
        "explain-failure",
        "runtime bisect",
    ] {
        let words: Vec<&str> = cmd.split(' ').collect();
        let short = stdout_of(&[&words[..], &["-h"]].concat());
        let long = stdout_of(&[&words[..], &["--help"]].concat());
        assert!(
            short.lines().count() <= 60,
            "{cmd} -h is {} lines",
            short.lines().count()
        );
        assert!(long.lines().count() > short.lines().count(), "{cmd}");
        let in_long = flag_names(&long);
        for flag in flag_names(&short) {
            assert!(in_long.contains(&flag), "{cmd}: --{flag} in -h but not in --help");
        }
        if in_long.len() > flag_names(&short).len() {
            assert!(
                short.contains("--help shows every flag"),
                "{cmd} -h does not say --help has more"
            );
        }
    }
    assert!(!stdout_of(&["--help"]).contains("__worker"));
    assert!(!stdout_of(&["help"]).contains("__worker"));
}

#[test]
fn completions_and_man_pages() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout_of(&["completions", shell]);
        assert!(script.contains("npu-audit") && script.contains("compare"), "{shell}");
        assert!(script.contains("min-sqnr"), "{shell} completes compare's flags");
        assert!(!script.contains("__worker"), "{shell} offers the internal worker");
    }
    let page = stdout_of(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH npu-audit"),
        "{}",
        &page[..200.min(page.len())]
    );
    let dir = tempdir();
    let pages = dir.path().join("man");
    stdout_of(&["man", "--dir", pages.to_str().expect("utf-8")]);
    for name in ["npu-audit.1", "npu-audit-compare.1", "npu-audit-merge.1"] {
        let text = std::fs::read_to_string(pages.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains(".TH"), "{name}");
    }
}

#[test]
fn standard_input_and_output_stand_in_for_files() {
    let report = repo("fixtures/reports/fallback.json");
    let text = std::fs::read(&report).expect("committed report");
    // A report on stdin renders like the file.
    let piped = bin().args(["render", "-"]).write_stdin(text).output().expect("run");
    assert_eq!(piped.status.code(), Some(0));
    let from_file = stdout_of(&["render", report.to_str().expect("utf-8")]);
    assert_eq!(String::from_utf8_lossy(&piped.stdout), from_file);
    // `--junit -` puts the XML on stdout instead of the table.
    let xml = stdout_of(&["render", report.to_str().expect("utf-8"), "--junit", "-"]);
    assert!(xml.starts_with("<?xml") && xml.contains("<testsuites"), "{xml}");
    // Two outputs cannot both be stdout.
    let out = bin()
        .args([
            "render",
            report.to_str().expect("utf-8"),
            "--junit",
            "-",
            "--markdown",
            "-",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("standard output"), "{err}");
}

#[test]
fn the_policy_file_is_found_upward_and_through_the_environment() {
    let dir = tempdir();
    let repo_root = dir.path().join("project");
    let deep = repo_root.join("models").join("v2");
    std::fs::create_dir_all(&deep).expect("mkdir");
    std::fs::create_dir_all(repo_root.join(".git")).expect("mkdir");
    std::fs::write(repo_root.join("npu-audit.toml"), "[defaults]\nmin_sqnr_db = 31\n").expect("write");
    let out = bin().current_dir(&deep).arg("check-config").output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("npu-audit.toml: valid"), "{stdout}");
    assert!(stdout.contains("31"), "{stdout}");
    let other = dir.path().join("other.toml");
    std::fs::write(&other, "[defaults]\nmin_sqnr_db = 27.5\n").expect("write");
    let out = bin()
        .current_dir(&deep)
        .env("NPU_AUDIT_CONFIG", &other)
        .arg("check-config")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("other.toml: valid") && stdout.contains("27.5"),
        "{stdout}"
    );
}

#[test]
fn quiet_verbose_and_colour() {
    let args = [
        "compare",
        &cnn(),
        "--reference",
        &cnn_fp32(),
        "-t",
        "cpu",
        "--fingerprint",
        "off",
    ];
    let quiet = bin().args(args).arg("-q").output().expect("run");
    assert_eq!(quiet.status.code(), Some(0));
    assert!(quiet.stderr.is_empty(), "{}", String::from_utf8_lossy(&quiet.stderr));
    let verbose = bin().args(args).arg("-v").output().expect("run");
    let stderr = String::from_utf8_lossy(&verbose.stderr);
    assert!(stderr.contains("session cpu ok"), "{stderr}");
    assert!(
        stderr.contains("onnxruntime 1.31.1"),
        "where the runtime was found: {stderr}"
    );
    let coloured = bin()
        .args(args)
        .args(["--color", "always"])
        .env_remove("NO_COLOR")
        .output()
        .expect("run");
    assert!(
        String::from_utf8_lossy(&coloured.stdout).contains("\u{1b}["),
        "--color always colours"
    );
    let plain = bin().args(args).args(["--color", "never"]).output().expect("run");
    assert!(
        !String::from_utf8_lossy(&plain.stdout).contains('\u{1b}'),
        "--color never does not"
    );
}

/// A flag an error asks for is in `-h`: `eval` on a model with two outputs asks for `--output`
/// (exit 2), and `eval -h` lists it.
#[test]
fn the_flag_evals_error_asks_for_is_in_its_short_help() {
    let dir = tempdir();
    std::fs::copy(repo("fixtures/inputs/minilm_seed7.npz"), dir.path().join("s000.npz")).expect("copy");
    let out = bin()
        .args([
            "eval",
            repo("fixtures/real/minilm_l2_qdq_u8.onnx").to_str().expect("utf-8"),
            "--reference",
            repo("fixtures/real/minilm_l2_fp32.onnx").to_str().expect("utf-8"),
            "--dataset",
            dir.path().to_str().expect("utf-8"),
            "--task",
            "agree",
            "-t",
            "cpu",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("name the one the task reads with --output"), "{stderr}");
    let short = stdout_of(&["eval", "-h"]);
    assert!(
        short.contains("--output <NAME>") && short.contains("required when the model has several"),
        "{short}"
    );
}
