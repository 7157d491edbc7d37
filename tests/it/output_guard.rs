//! No output of any command replaces one of its inputs (issue 28): every command × every flag
//! that writes a file or directory × every kind of file the command reads (model, reference,
//! `--input`, `--inputs`, policy, previous report, tap list, chunk and sequence files, runtime
//! libraries, golden files, report members, fleet files, shard reports and their saved outputs,
//! the triage store, pipeline files and their stage models), each named directly, through a
//! symbolic link, a `..` alias and a hard link, and new files inside a directory the command reads.
//! Each case must fail with a usage error (exit 2) before any work, and a checksum of every file of
//! the workspace proves that nothing was replaced, added or removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::{bin, repo};

/// The workspace every case runs in: copies of the fixtures each command reads.
struct Workspace {
    root: tempfile::TempDir,
}

impl Workspace {
    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn arg(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    /// Every file under the workspace with its SHA-256 (links not followed: a link is its target
    /// path).
    fn checksums(&self) -> BTreeMap<PathBuf, String> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
            for e in std::fs::read_dir(dir).expect("read_dir") {
                let p = e.expect("entry").path();
                let meta = std::fs::symlink_metadata(&p).expect("meta");
                if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&p).expect("readlink");
                    out.insert(p, format!("-> {}", target.display()));
                } else if meta.is_dir() {
                    out.insert(p.clone(), "dir".into());
                    walk(&p, out);
                } else {
                    out.insert(p.clone(), npu_audit::foundation::hash::sha256_file(&p).expect("sha256"));
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(self.root.path(), &mut out);
        out
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let p = e.expect("entry").path();
        let dest = to.join(p.file_name().expect("name"));
        if p.is_dir() {
            copy_tree(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).expect("copy");
        }
    }
}

/// Copies the fixtures, writes the small inputs, and runs one shard audit for `merge` to read.
fn workspace() -> Workspace {
    let ws = Workspace {
        root: tempfile::tempdir().expect("tempdir"),
    };
    let copy = |from: &str, to: &str| {
        std::fs::create_dir_all(ws.path(to).parent().expect("parent")).expect("mkdir");
        std::fs::copy(repo(from), ws.path(to)).expect("copy fixture");
    };
    copy("fixtures/models/cnn_qdq_u8.onnx", "in/model.onnx");
    copy("fixtures/models/cnn_fp32.onnx", "in/reference.onnx");
    copy("fixtures/inputs/cnn_seed7.npz", "in/s0.npz");
    copy("fixtures/inputs/cnn_seed7.npz", "in/sequence.npz");
    let image = crate::common::npz_array(&repo("fixtures/inputs/cnn_seed7.npz"), "image");
    image.write_npy(&ws.path("in/image.npy")).expect("write npy");
    image.write_npy(&ws.path("in/chunk.npy")).expect("write npy");
    std::fs::write(ws.path("in/policy.toml"), "[defaults]\nmin_sqnr_db = 1.0\n").expect("write");
    std::fs::write(ws.path("in/taps.txt"), "*\n").expect("write");
    std::fs::write(ws.path("in/libonnxruntime.so.1.31.1"), b"\x7fELF not a library").expect("write");
    std::fs::write(ws.path("in/store.db"), b"not yet a store").expect("write");
    copy_tree(&repo("golden/cnn_fp32"), &ws.path("golden"));
    for report in ["a_s24", "f_s22"] {
        copy_tree(
            &repo(&format!("fixtures/device_reports/fleet/{report}")),
            &ws.path(&format!("fleet/{report}")),
        );
    }
    for stage in ["stage1_fp32", "stage1_qdq_u8", "stage2_fp32", "stage2_qdq_u8"] {
        copy(
            &format!("fixtures/real/ppocr_cls_{stage}.onnx"),
            &format!("pipe/ppocr_cls_{stage}.onnx"),
        );
    }
    copy("fixtures/real/ppocr_cls_pipeline.toml", "pipe/pipeline.toml");
    // An eval set of the cnn's inputs, labelled, and the class names.
    copy("fixtures/inputs/cnn_seed7.npz", "set/s0.npz");
    copy("fixtures/inputs/cnn_seed7.npz", "set/s1.npz");
    std::fs::write(ws.path("set/labels.csv"), "id,label\ns0,3\ns1,4\n").expect("write");
    let names: String = (0..10).map(|k| format!("class{k}\n")).collect();
    std::fs::write(ws.path("in/classes.txt"), names).expect("write");
    std::fs::create_dir_all(ws.path("shard")).expect("mkdir");
    let shard = bin()
        .args([
            "compare",
            &ws.arg("in/model.onnx"),
            "--reference",
            &ws.arg("in/reference.onnx"),
        ])
        .args([
            "-t",
            "cpu",
            "--shard",
            "1/1",
            "--fingerprint",
            "off",
            "--out",
            &ws.arg("shard/a.json"),
        ])
        .args(["--input", &format!("image={}", ws.arg("in/image.npy"))])
        .output()
        .expect("run the shard");
    assert!(
        shard.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&shard.stderr)
    );
    assert!(
        ws.path("shard/a.outputs/golden/s0.npz").is_file(),
        "the shard saved its outputs"
    );
    std::fs::create_dir_all(ws.path("links")).expect("mkdir");
    ws
}

/// How an output flag names an input: the path itself, a symbolic link to it, a `..` alias, a
/// hard link.
#[derive(Debug, Clone, Copy)]
enum Alias {
    Direct,
    Symlink,
    DotDot,
    HardLink,
}

/// `rel` (a file of the workspace) named as `alias`; links are made in `links/`.
fn aliased(ws: &Workspace, rel: &str, alias: Alias, n: usize) -> Option<String> {
    let target = ws.path(rel);
    let link = ws.path(&format!("links/{n}-{}", target.file_name()?.to_string_lossy()));
    match alias {
        Alias::Direct => Some(target.display().to_string()),
        Alias::DotDot => {
            let parent = target.parent()?;
            let up = parent.join("..").join(parent.file_name()?).join(target.file_name()?);
            Some(up.display().to_string())
        }
        Alias::Symlink => {
            std::os::unix::fs::symlink(&target, &link).ok()?;
            Some(link.display().to_string())
        }
        Alias::HardLink => {
            // Directories cannot be hard-linked.
            target.is_file().then_some(())?;
            std::fs::hard_link(&target, &link).ok()?;
            Some(link.display().to_string())
        }
    }
}

/// One command line, the files it reads and the directories it reads files from (relative to the
/// workspace), and its output flags (`true`: a directory flag).
struct Case {
    name: &'static str,
    args: Vec<String>,
    reads: Vec<&'static str>,
    trees: Vec<&'static str>,
    outputs: Vec<(&'static str, bool)>,
}

const REPORT_FILES: [(&str, bool); 5] = [
    ("--out", false),
    ("--markdown", false),
    ("--junit", false),
    ("--html", false),
    ("--node-data", true),
];

fn cases(ws: &Workspace) -> Vec<Case> {
    let a = |rel: &str| ws.arg(rel);
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let image = format!("image={}", a("in/image.npy"));
    let mut compare_outputs = REPORT_FILES.to_vec();
    compare_outputs.extend([("--save-outputs", true), ("--logs", true)]);
    let files_of_compare = vec![
        "in/model.onnx",
        "in/reference.onnx",
        "in/image.npy",
        "in/s0.npz",
        "in/policy.toml",
        "shard/a.json",
        "in/taps.txt",
        "in/libonnxruntime.so.1.31.1",
    ];
    let compare_args = |command: &str| -> Vec<String> {
        let mut v = s(&[
            command,
            &a("in/model.onnx"),
            "--reference",
            &a("in/reference.onnx"),
            "-t",
            "cpu",
        ]);
        v.extend(s(&[
            "--input",
            &image,
            "--inputs",
            &a("in/s0.npz"),
            "--config",
            &a("in/policy.toml"),
        ]));
        v.extend(s(&[
            "--baseline-report",
            &a("shard/a.json"),
            "--tap-list",
            &a("in/taps.txt"),
        ]));
        v.extend(s(&["--runtime", &format!("cpu={}", a("in/libonnxruntime.so.1.31.1"))]));
        v
    };
    vec![
        Case {
            name: "compare",
            args: compare_args("compare"),
            reads: files_of_compare.clone(),
            trees: vec![],
            outputs: compare_outputs.clone(),
        },
        Case {
            name: "layers",
            args: compare_args("layers"),
            reads: files_of_compare,
            trees: vec![],
            outputs: compare_outputs.clone(),
        },
        Case {
            name: "compare --golden",
            args: s(&["compare", &a("in/model.onnx"), "--golden", &a("golden"), "-t", "cpu"]),
            reads: vec![
                "in/model.onnx",
                "golden/manifest.json",
                "golden/inputs/s0/i0.npy",
                "golden/outputs/s0/o0.npy",
            ],
            trees: vec!["golden", "golden/inputs"],
            outputs: compare_outputs.clone(),
        },
        Case {
            name: "compare --stream",
            args: s(&[
                "compare",
                &a("in/model.onnx"),
                "-t",
                "cpu",
                "--stream",
                "probs->image",
                "--chunk",
                &format!("image={}", a("in/chunk.npy")),
                "--sequence",
                &a("in/sequence.npz"),
            ]),
            reads: vec!["in/model.onnx", "in/chunk.npy", "in/sequence.npz"],
            trees: vec![],
            outputs: compare_outputs,
        },
        Case {
            name: "merge",
            args: s(&[
                "merge",
                &a("shard/a.json"),
                "--outputs",
                &format!("{}={}", a("shard/a.json"), a("shard/a.outputs")),
            ]),
            reads: vec![
                "shard/a.json",
                "shard/a.outputs/golden/s0.npz",
                "shard/a.outputs/cpu/s0.npz",
            ],
            trees: vec!["shard/a.outputs"],
            outputs: REPORT_FILES.to_vec(),
        },
        Case {
            name: "merge (outputs beside the report)",
            args: s(&["merge", &a("shard/a.json")]),
            reads: vec!["shard/a.json", "shard/a.outputs/golden/s0.npz"],
            trees: vec!["shard/a.outputs"],
            outputs: REPORT_FILES.to_vec(),
        },
        Case {
            name: "render",
            args: s(&["render", &a("shard/a.json")]),
            reads: vec!["shard/a.json"],
            trees: vec![],
            outputs: REPORT_FILES.to_vec(),
        },
        Case {
            name: "triage",
            args: s(&[
                "triage",
                &a("fleet"),
                "--model",
                &a("in/model.onnx"),
                "--reference",
                &a("in/reference.onnx"),
                "--input",
                &image,
                "--db",
                &a("in/store.db"),
            ]),
            reads: vec![
                "in/model.onnx",
                "in/reference.onnx",
                "in/image.npy",
                "in/store.db",
                "fleet/a_s24/device.json",
                "fleet/f_s22/outputs.npz",
            ],
            trees: vec!["fleet", "fleet/f_s22"],
            outputs: vec![("--out", false), ("--markdown", false), ("--html", false)],
        },
        Case {
            name: "triage --golden",
            args: s(&[
                "triage",
                &a("fleet/a_s24"),
                "--model",
                &a("in/model.onnx"),
                "--golden",
                &a("golden"),
                "--no-db",
            ]),
            reads: vec![
                "fleet/a_s24/outputs.npz",
                "fleet/a_s24/device.json",
                "golden/manifest.json",
            ],
            trees: vec!["fleet/a_s24", "golden"],
            outputs: vec![("--out", false), ("--markdown", false), ("--html", false)],
        },
        Case {
            name: "matrix",
            args: s(&[
                "matrix",
                "--variant",
                &format!("u8={}", a("in/model.onnx")),
                "-t",
                "cpu",
                "--reference",
                &a("in/reference.onnx"),
                "--input",
                &image,
                "--config",
                &a("in/policy.toml"),
                "--search",
                "float",
            ]),
            reads: vec!["in/model.onnx", "in/reference.onnx", "in/image.npy", "in/policy.toml"],
            trees: vec![],
            outputs: vec![
                ("--out", false),
                ("--markdown", false),
                ("--html", false),
                ("--dispatch", false),
                ("--write-candidates", true),
            ],
        },
        Case {
            name: "matrix --golden",
            args: s(&[
                "matrix",
                "--variant",
                &format!("u8={}", a("in/model.onnx")),
                "-t",
                "cpu",
                "--golden",
                &a("golden"),
            ]),
            reads: vec!["in/model.onnx", "golden/manifest.json", "golden/outputs/s0/o0.npy"],
            trees: vec!["golden"],
            outputs: vec![("--out", false), ("--dispatch", false)],
        },
        Case {
            name: "pipeline",
            args: s(&[
                "pipeline",
                &a("pipe/pipeline.toml"),
                "-t",
                "cpu",
                "--inputs",
                &a("in/s0.npz"),
            ]),
            reads: vec![
                "pipe/pipeline.toml",
                "pipe/ppocr_cls_stage1_qdq_u8.onnx",
                "pipe/ppocr_cls_stage2_fp32.onnx",
                "in/s0.npz",
            ],
            trees: vec![],
            outputs: vec![("--out", false)],
        },
        Case {
            name: "repro",
            args: s(&[
                "repro",
                &a("in/model.onnx"),
                "--reference",
                &a("in/reference.onnx"),
                "-t",
                "cpu",
                "--inputs",
                &a("in/s0.npz"),
            ]),
            reads: vec!["in/model.onnx", "in/reference.onnx", "in/s0.npz"],
            trees: vec![],
            outputs: vec![("--report", false), ("--markdown", false), ("--out", true)],
        },
        Case {
            name: "eval",
            args: s(&[
                "eval",
                &a("in/model.onnx"),
                "--reference",
                &a("in/reference.onnx"),
                "--dataset",
                &a("set"),
                "--task",
                "classify",
                "--output",
                "probs",
                "--classes",
                &a("in/classes.txt"),
                "-t",
                "cpu",
                "--config",
                &a("in/policy.toml"),
            ]),
            reads: vec![
                "in/model.onnx",
                "in/reference.onnx",
                "set/s0.npz",
                "set/labels.csv",
                "in/classes.txt",
                "in/policy.toml",
            ],
            trees: vec!["set"],
            outputs: vec![
                ("--out", false),
                ("--markdown", false),
                ("--html", false),
                ("--records", true),
            ],
        },
        Case {
            name: "eval --golden --labels",
            args: s(&[
                "eval",
                &a("in/model.onnx"),
                "--golden",
                &a("golden"),
                "--dataset",
                &a("in/sequence.npz"),
                "--labels",
                &a("set/labels.csv"),
                "--task",
                "agree",
                "--output",
                "probs",
                "-t",
                "cpu",
            ]),
            reads: vec![
                "golden/manifest.json",
                "golden/outputs/s0/o0.npy",
                "in/sequence.npz",
                "set/labels.csv",
            ],
            trees: vec!["golden"],
            outputs: vec![("--out", false), ("--html", false), ("--records", true)],
        },
        Case {
            name: "runtime bisect",
            args: s(&[
                "runtime",
                "bisect",
                &a("in/model.onnx"),
                "-t",
                "cpu",
                "--from",
                "1.30.0",
                "--to",
                "1.31.1",
                "--reference",
                &a("in/reference.onnx"),
                "--input",
                &image,
            ]),
            reads: vec!["in/model.onnx", "in/reference.onnx", "in/image.npy"],
            trees: vec![],
            outputs: vec![("--out", false)],
        },
        Case {
            name: "runtime bisect --golden",
            args: s(&[
                "runtime",
                "bisect",
                &a("in/model.onnx"),
                "-t",
                "cpu",
                "--from",
                "1.30.0",
                "--to",
                "1.31.1",
                "--golden",
                &a("golden"),
            ]),
            reads: vec!["golden/manifest.json", "golden/inputs/s0/i0.npy"],
            trees: vec!["golden"],
            outputs: vec![("--out", false)],
        },
        Case {
            name: "fingerprint",
            args: s(&[
                "fingerprint",
                "-t",
                "cpu",
                "--runtime",
                &format!("cpu={}", a("in/libonnxruntime.so.1.31.1")),
            ]),
            reads: vec!["in/libonnxruntime.so.1.31.1"],
            trees: vec![],
            outputs: vec![("--out", false)],
        },
    ]
}

/// What the tool may say when it refuses an output that would replace (or land inside) an input.
const REFUSALS: [&str; 5] = [
    "one of this run's inputs",
    "a directory this run reads",
    "names the triage store",
    "not a directory",
    "not a file it can write",
];

/// Whether `flag` names a directory in `case`.
fn is_dir_flag(case: &Case, flag: &str) -> bool {
    case.outputs.iter().any(|(f, dir)| *f == flag && *dir)
}

/// Runs one case with `flag` naming `path`: its exit code and standard error.
fn run_with(case: &Case, flag: &str, path: &str) -> (Option<i32>, String) {
    let mut cmd = bin();
    cmd.args(&case.args).args([flag, path]);
    if matches!(case.args[0].as_str(), "compare" | "layers") {
        cmd.args(["--fingerprint", "off"]);
    }
    let out = cmd.output().expect("run npu-audit");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
}

/// Runs one case with `flag` naming `path`; the refusal and its message, or why not.
fn refused(case: &Case, flag: &str, path: &str) -> Result<(), String> {
    let (code, stderr) = run_with(case, flag, path);
    if code == Some(2) && REFUSALS.iter().any(|r| stderr.contains(r)) && stderr.lines().count() == 1 {
        return Ok(());
    }
    Err(format!("{} {flag} {path}: exit {code:?}: {stderr}", case.name))
}

#[test]
fn no_output_of_any_command_replaces_or_lands_inside_one_of_its_inputs() {
    let ws = workspace();
    let before = ws.checksums();
    let mut failures = Vec::new();
    let mut tried = 0;
    let mut n = 0;
    for case in cases(&ws) {
        for rel in &case.reads {
            assert!(ws.path(rel).exists(), "{}: the workspace has no {rel}", case.name);
        }
        for &(flag, _) in &case.outputs {
            for rel in &case.reads {
                for alias in [Alias::Direct, Alias::Symlink, Alias::DotDot, Alias::HardLink] {
                    n += 1;
                    let Some(path) = aliased(&ws, rel, alias, n) else {
                        continue;
                    };
                    tried += 1;
                    if let Err(e) = refused(&case, flag, &path) {
                        failures.push(format!("{alias:?}: {e}"));
                    }
                }
            }
            // The control: a file flag naming a place outside every input passes the input checks
            // (and stops at the next one, a directory that does not exist, before any work), so a
            // refusal above is the guard's and not some other error's.
            if !is_dir_flag(&case, flag) {
                tried += 1;
                let elsewhere = ws.arg(&format!("nowhere/{}", flag.trim_start_matches('-')));
                match run_with(&case, flag, &elsewhere) {
                    (Some(2), stderr) if stderr.contains("does not exist") && !stderr.contains("this run") => {}
                    (code, stderr) => failures.push(format!("control: {} {flag}: exit {code:?}: {stderr}", case.name)),
                }
            }
            // A new file inside every directory the command reads.
            for dir in &case.trees {
                let inside = ws.arg(&format!("{dir}/new-{}", flag.trim_start_matches('-')));
                tried += 1;
                if let Err(e) = refused(&case, flag, &inside) {
                    failures.push(format!("inside: {e}"));
                }
            }
        }
    }
    let links = ws.path("links");
    let after: BTreeMap<PathBuf, String> = ws
        .checksums()
        .into_iter()
        .filter(|(p, _)| !p.starts_with(&links))
        .collect();
    let before: BTreeMap<PathBuf, String> = before.into_iter().filter(|(p, _)| !p.starts_with(&links)).collect();
    assert!(tried > 400, "only {tried} cases ran");
    assert!(
        failures.is_empty(),
        "{} of {tried} outputs were not refused:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(before, after, "a refused command changed the workspace");
}

#[test]
fn golden_create_never_replaces_a_directory_that_holds_its_inputs_or_anything_else() {
    let ws = workspace();
    // A note a user keeps beside a golden run: not part of it, so --force must not delete it.
    std::fs::write(ws.path("golden/notes.txt"), "which phone this came from").expect("write");
    let before = ws.checksums();
    for (dest, why) in [
        ("in", "an input of this run"),
        ("fleet", "not a golden run"),
        ("golden", "notes.txt, which is not part of its golden run"),
    ] {
        let out = bin()
            .args([
                "golden",
                "create",
                &ws.arg("in/reference.onnx"),
                "--out",
                &ws.arg(dest),
                "--force",
            ])
            .args(["--input", &format!("image={}", ws.arg("in/image.npy"))])
            .output()
            .expect("run npu-audit");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--out {dest}: {stderr}");
        assert!(stderr.contains(why), "--out {dest}: {stderr}");
    }
    assert_eq!(before, ws.checksums(), "golden create --force changed the workspace");
    // Without the stranger, --force replaces the earlier golden run.
    std::fs::remove_file(ws.path("golden/notes.txt")).expect("rm");
    let out = bin()
        .args([
            "golden",
            "create",
            &ws.arg("in/reference.onnx"),
            "--out",
            &ws.arg("golden"),
            "--force",
        ])
        .args(["--input", &format!("image={}", ws.arg("in/image.npy"))])
        .output()
        .expect("run npu-audit");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(ws.path("golden/inputs/s0/i0.npy").is_file() && !ws.path("golden/inputs/s1").exists());
}

#[test]
fn logs_replace_only_logs_an_earlier_audit_kept() {
    let ws = workspace();
    let logs = ws.path("logs");
    std::fs::create_dir(&logs).expect("mkdir");
    std::fs::write(logs.join("cpu.log"), "my own notes").expect("write");
    let run = || {
        bin()
            .args([
                "compare",
                &ws.arg("in/model.onnx"),
                "--reference",
                &ws.arg("in/reference.onnx"),
                "-t",
                "cpu",
            ])
            .args([
                "--input",
                &format!("image={}", ws.arg("in/image.npy")),
                "--fingerprint",
                "off",
                "--no-baseline",
            ])
            .args(["--logs", &ws.arg("logs"), "--format", "json"])
            .output()
            .expect("run npu-audit")
    };
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("holds files npu-audit did not keep there"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(logs.join("cpu.log")).expect("read"),
        "my own notes"
    );
    // In a new directory the logs land with the marker; a second audit replaces its own logs.
    std::fs::remove_file(logs.join("cpu.log")).expect("rm");
    for _ in 0..2 {
        let out = run();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(logs.join(".npu-audit-logs").is_file());
        let log = std::fs::read_to_string(logs.join("cpu.log")).expect("read");
        assert!(!log.contains("my own notes"));
    }
}

#[test]
fn render_from_stdin_never_replaces_the_file_stdin_is_redirected_from() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    std::fs::copy(repo("fixtures/reports/cnn.json"), &report).expect("copy");
    let before = std::fs::read(&report).expect("read");
    for flag in ["--out", "--markdown", "--html", "--junit"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_npu-audit"))
            .args(["render", "-", flag])
            .arg(&report)
            .env("NO_COLOR", "1")
            .stdin(std::fs::File::open(&report).expect("open"))
            .output()
            .expect("run npu-audit");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains("standard input, one of this run's inputs"),
            "{flag}: {stderr}"
        );
        assert_eq!(
            std::fs::read(&report).expect("read"),
            before,
            "{flag} replaced the input"
        );
    }
    // A pipe is no file: the same report piped in may be written anywhere.
    let piped = dir.path().join("copy.json");
    let out = bin()
        .args(["render", "-", "--out"])
        .arg(&piped)
        .write_stdin(before)
        .output()
        .expect("run npu-audit");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(piped.is_file());
}
