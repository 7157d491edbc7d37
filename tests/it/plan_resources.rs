//! What `plan`'s recipes ask their engines for, end to end: the CPUs, memory and time of the rule
//! docs/scale.md ("Resources") states, recomputed here from its figures and the fixtures' sizes
//! for a split with measured costs, in every format (Slurm's `#SBATCH` lines, the Kubernetes
//! container's requests and limits and the pod's deadline, GitHub's `timeout-minutes`, the
//! matrix's fields, the table's line); the user's figures instead of the estimates, and bad ones
//! refused in one line; and the Slurm script's merge jobs run as printed: the `afterok` merge
//! joins every shard, the `afternotok` fallback names the shard whose task failed.

use crate::common;
use crate::plan::{eval_report, eval_words, plan, real, set};

use std::path::Path;

use common::*;
use serde_json::Value;

/// docs/scale.md, "Resources": a worker's MiB at rest and per MiB of its model, its CPUs; the
/// golden run's and the coordinator's; the headroom and the step memory is rounded up to; setup
/// and safety factor.
const GOLDEN: (f64, f64) = (64.0, 1.5);
const QNN: (f64, f64, u32) = (256.0, 6.0, 2);
const COORDINATOR: (f64, f64) = (64.0, 2.0);
const HEADROOM: f64 = 1.25;
const STEP_MIB: f64 = 256.0;
const SETUP_S: f64 = 300.0;
const SAFETY: f64 = 2.0;

fn mib(path: &str) -> f64 {
    std::fs::metadata(path).unwrap().len() as f64 / (1024.0 * 1024.0)
}

/// The eval split here: the classifier on cpu and qnn:sm8650 with the baseline over 40 samples.
fn words(set: &Path) -> Vec<String> {
    let mut words = eval_words(set);
    words.truncate(words.len() - 5); // without qnn:8 Gen 3, openvino and --no-config
    words.extend(["-t", "qnn:sm8650", "--no-config"].map(String::from));
    words
}

/// An earlier eval's report with known medians: cpu 2 ms, cpu:noopt 4 ms, qnn:sm8650 3 s a sample.
fn measured(dir: &Path, set: &Path) -> String {
    let mut report = eval_report(dir, set);
    let mut qnn = report["targets"][0].clone();
    qnn["id"] = "qnn:sm8650".into();
    report["targets"].as_array_mut().unwrap().push(qnn);
    for t in report["targets"].as_array_mut().unwrap() {
        t["run_ms_median"] = match t["id"].as_str().unwrap() {
            "cpu" => 2.0,
            "cpu:noopt" => 4.0,
            _ => 3000.0,
        }
        .into();
    }
    let path = dir.join("measured.json");
    std::fs::write(&path, report.to_string()).unwrap();
    path.display().to_string()
}

/// A recipe's comments as one text (their lines are broken between words).
fn flat(text: &str) -> String {
    text.replace("\n# ", " ")
}

/// The one line of `text` that starts with `prefix`, without it.
fn field<'a>(text: &'a str, prefix: &str) -> &'a str {
    let found: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix(prefix))
        .collect();
    assert_eq!(found.len(), 1, "{prefix}: {text}");
    found[0].trim()
}

#[test]
fn every_recipe_asks_for_the_cpus_memory_and_time_the_documented_rule_gives() {
    let dir = tempdir();
    let set = set(dir.path(), 40);
    let words = words(&set);
    let costs_from = measured(dir.path(), &set);
    let args = ["--shards", "2", "--costs-from", costs_from.as_str()];
    // Weights: the medians over the cheapest's (2 ms): cpu 1, cpu:noopt 2, qnn 1500. The line:
    // cpu 40, qnn 60000 from 40 (sample k at 40 + 1500k), noopt 80; 60120 cut at 30060: qnn's
    // samples 0-20 start in shard 1, 21-39 in shard 2.
    let table = plan(&args, &words);
    assert!(table.contains("cpu 0-39, qnn:sm8650 0-20\n"), "{table}");
    assert!(table.contains("qnn:sm8650 21-39, cpu:noopt 0-39\n"), "{table}");
    // CPUs: every window streams the golden run (1 CPU) beside its run: cpu 1, noopt 1, qnn 2.
    let cpus = 1 + QNN.2;
    // Memory: the fullest window, golden run and qnn (one session each: 3 CPUs over 1 + 1 threads),
    // with the coordinator; x 1.25, up to a multiple of 256 MiB.
    let (m, r) = (mib(&real("ppocr_cls_qdq_u8.onnx")), mib(&real("ppocr_cls_fp32.onnx")));
    let peak = COORDINATOR.0 + COORDINATOR.1 * (m + r) + (GOLDEN.0 + GOLDEN.1 * r) + (QNN.0 + QNN.1 * m);
    let mem = ((peak * HEADROOM / STEP_MIB).ceil() * STEP_MIB) as u64;
    // Time: shard 1 runs qnn's 21 samples at 3 s after cpu's 40 at 2 ms; shard 2 qnn's 19 and
    // noopt's 40 at 4 ms. Setup + 2 x the costliest, whole minutes.
    let shard_s = [21.0 * 3.0 + 40.0 * 0.002, 19.0 * 3.0 + 40.0 * 0.004];
    let minutes = ((SETUP_S + SAFETY * shard_s[0]) / 60.0).ceil() as u64;
    assert_eq!((cpus, mem, minutes), (3, 512, 8), "the figures below, by hand");

    let slurm = plan(&[&args[..], &["--format", "slurm"]].concat(), &words);
    let sbatch: Vec<&str> = slurm.lines().filter(|l| l.starts_with("#SBATCH")).collect();
    for want in [
        format!("#SBATCH --cpus-per-task={cpus}"),
        format!("#SBATCH --mem={mem}M"),
        format!("#SBATCH --time=0:{minutes:02}:00"),
    ] {
        assert!(sbatch.contains(&want.as_str()), "{want}: {slurm}");
    }
    assert!(flat(&slurm).contains("measured in --costs-from"), "{slurm}");

    let k8s = plan(&[&args[..], &["--format", "k8s"]].concat(), &words);
    let resources = format!(
        "          resources:\n            requests:\n              cpu: \"{cpus}\"\n              memory: {mem}Mi\n            \
         limits:\n              cpu: \"{cpus}\"\n              memory: {mem}Mi\n"
    );
    assert!(k8s.contains(&resources), "{k8s}");
    assert_eq!(field(&k8s, "activeDeadlineSeconds: "), (minutes * 60).to_string());

    let github = plan(&[&args[..], &["--format", "github"]].concat(), &words);
    assert!(
        github.contains(&format!(
            "    runs-on: ubuntu-latest\n    timeout-minutes: {minutes}\n    strategy:"
        )),
        "{github}"
    );
    assert!(
        github.contains("    timeout-minutes: 10\n    steps:"),
        "the merge job's: {github}"
    );
    assert!(
        flat(&github).contains(&format!("needs {cpus} CPUs, {mem}M of memory")),
        "{github}"
    );

    let matrix: Value = serde_json::from_str(&plan(&[&args[..], &["--format", "json"]].concat(), &words)).unwrap();
    for (i, entry) in matrix["include"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            (&entry["cpus"], &entry["mem_mib"], &entry["minutes"]),
            (&cpus.into(), &mem.into(), &minutes.into()),
            "{entry}"
        );
        assert_eq!(num(&entry["estimated_seconds"]), shard_s[i].ceil(), "{entry}");
    }
    assert_eq!(
        field(&table, "resources "),
        format!(
            "{cpus} CPUs, {mem}M of memory and 0:{minutes:02}:00 for each job (CPUs, memory, time estimated: docs/scale.md, \"Resources\")"
        )
    );
}

#[test]
fn the_users_figures_win_and_bad_ones_are_refused_in_one_line() {
    let dir = tempdir();
    let set = set(dir.path(), 4);
    let words = words(&set);
    let given = ["--shards", "2", "--cpus", "8", "--mem", "4G", "--time", "1-02:03:04"];
    let slurm = plan(&[&given[..], &["--format", "slurm"]].concat(), &words);
    for want in ["--cpus-per-task=8", "--mem=4G", "--time=1-02:03:04"] {
        assert!(slurm.contains(&format!("#SBATCH {want}\n")), "{want}: {slurm}");
    }
    assert!(flat(&slurm).contains("(CPUs, memory, time as given)"), "{slurm}");
    let k8s = plan(&[&given[..], &["--format", "k8s"]].concat(), &words);
    assert!(
        k8s.contains("              cpu: \"8\"\n              memory: 4Gi\n"),
        "{k8s}"
    );
    assert_eq!(
        field(&k8s, "activeDeadlineSeconds: "),
        (86_400 + 2 * 3600 + 3 * 60 + 4).to_string()
    );
    // 93784 s is 1563.07 minutes: GitHub's whole minutes cover it.
    let github = plan(&[&given[..], &["--format", "github"]].concat(), &words);
    assert!(github.contains("    timeout-minutes: 1564\n    strategy:"), "{github}");
    // Minutes alone, and memory in M without a unit, as Slurm reads them.
    let table = plan(&["--shards", "2", "--mem", "1536", "--time", "90"], &words);
    assert!(
        field(&table, "resources ")
            .starts_with("3 CPUs, 1536M of memory and 1:30:00 for each job (memory, time as given; CPUs estimated"),
        "{table}"
    );

    let model = real("ppocr_cls_qdq_u8.onnx");
    let set = set.display().to_string();
    for (flag, value) in [
        ("--cpus", "0"),
        ("--cpus", "two"),
        ("--cpus", "5000"),
        ("--mem", "4GB"),
        ("--mem", "0"),
        ("--mem", "1.5G"),
        ("--time", "0"),
        ("--time", "UNLIMITED"),
        ("--time", "1:2:3:4"),
        ("--time", "400-0"),
    ] {
        let args = [
            "plan",
            "--shards",
            "2",
            flag,
            value,
            "--",
            "eval",
            model.as_str(),
            "--dataset",
            set.as_str(),
            "--task",
            "agree",
            "--no-config",
        ];
        fails_with(&args, 2, &format!("{flag} '{value}'"));
    }
}

/// Runs `line` with bash in `dir`, the binary under test as `npu-audit` and `vars` set.
fn bash(dir: &Path, line: &str, vars: &[(&str, &str)]) -> std::process::Output {
    let tools = dir.join("tools");
    if !tools.exists() {
        std::fs::create_dir(&tools).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_npu-audit"), tools.join("npu-audit")).unwrap();
    }
    let path = format!("{}:{}", tools.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = std::process::Command::new("bash");
    cmd.args(["-c", line]).current_dir(dir).env("PATH", path);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// The `--wrap` command of the script's merge job submitted with `dependency`.
fn merge_command(script: &str, dependency: &str) -> String {
    let line = field(script, &format!("#   sbatch --dependency={dependency}:$jobid "));
    let wrapped = line.split_once("--wrap='").unwrap().1;
    wrapped.strip_suffix('\'').unwrap().to_string()
}

#[test]
fn the_fallback_merge_names_the_shard_whose_task_failed() {
    // An eval on the CPU EP in 2 shards, run as the Slurm script runs its tasks: task 1 ran, task
    // 2 failed before writing its file. The afternotok merge runs the printed command.
    let dir = tempdir();
    let set = set(dir.path(), 4);
    let mut words = eval_words(&set);
    words.truncate(words.len() - 7); // the model, reference, set and task; no target yet
    words.extend(["-t", "cpu", "--no-config"].map(String::from));
    let script = plan(&["--shards", "2", "--format", "slurm"], &words);
    std::fs::write(dir.path().join("npu-audit.sbatch"), &script).unwrap();
    let task = |id: &str| {
        let vars = [
            ("SLURM_ARRAY_TASK_ID", id),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "2"),
        ];
        let out = bash(dir.path(), "bash npu-audit.sbatch", &vars);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let fallback = merge_command(&script, "afternotok");
    assert_eq!(fallback, merge_command(&script, "afterok"));
    // No task wrote its file: the pattern matches nothing, and merge says so.
    let none = bash(dir.path(), &fallback, &[]);
    assert_eq!(none.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("shards/shard-*.json: no file matches this pattern"),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
    task("1");
    assert!(dir.path().join("shards/shard-1.json").is_file());
    let partial = bash(dir.path(), &fallback, &[]);
    let stderr = String::from_utf8_lossy(&partial.stderr);
    assert_eq!(partial.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "npu-audit: error: shard 2/2 missing: give every shard's file"
    );
    assert!(!dir.path().join("merged.json").exists());
    // Submitted again, the array finishes what is left: task 1's file is complete, it runs
    // nothing; task 2 runs; the merge joins both.
    assert!(task("1").contains("is already done"));
    task("2");
    let merged = bash(dir.path(), &merge_command(&script, "afterok"), &[]);
    assert_eq!(
        merged.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(dir.path().join("merged.json")).unwrap()).unwrap();
    for id in ["cpu", "cpu:noopt"] {
        assert_eq!(target(&report, id)["status"], "ok", "{id}");
    }
}
