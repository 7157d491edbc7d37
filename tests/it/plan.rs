//! `npu-audit plan` end to end: the units of an eval's split cover every (run, sample) exactly
//! once with the shares recomputed here from the weights; the commands printed run as printed
//! (their words read back by a shell, a compare split run and merged); the Slurm script runs under
//! a stand-in `npu-audit` with Slurm's variables; the Kubernetes and GitHub recipes have the
//! fields their engines read; bad requests are refused with exit code 2 and one line.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use npu_audit::data::tensor::{write_npz, Tensor, TensorData};
use serde_json::Value;

pub(crate) fn real(name: &str) -> String {
    repo(&format!("fixtures/real/{name}")).display().to_string()
}

/// An eval set of `n` samples for the PP-OCR classifier (zeros: `plan` reads the set's size only).
pub(crate) fn set(dir: &Path, n: usize) -> PathBuf {
    let set = dir.join("set");
    std::fs::create_dir_all(&set).unwrap();
    let x = Tensor::new(vec![1, 3, 48, 192], TensorData::Float32(vec![0.0; 3 * 48 * 192])).unwrap();
    for k in 0..n {
        write_npz(&set.join(format!("s{k:03}.npz")), &[("x".to_string(), &x)]).unwrap();
    }
    set
}

/// The eval command the tests split: three targets (one named with spaces) and the baseline.
pub(crate) fn eval_words(set: &Path) -> Vec<String> {
    [
        "eval",
        &real("ppocr_cls_qdq_u8.onnx"),
        "--reference",
        &real("ppocr_cls_fp32.onnx"),
        "--dataset",
        set.to_str().unwrap(),
        "--task",
        "agree",
        "-t",
        "cpu",
        "-t",
        "qnn:8 Gen 3",
        "-t",
        "openvino",
        "--no-config",
    ]
    .map(String::from)
    .to_vec()
}

/// The JSON report of a real eval of the classifier on `set` (cpu and the baseline, cpu:noopt).
pub(crate) fn eval_report(dir: &Path, set: &Path) -> Value {
    let out = dir.join("eval-for-costs.json");
    let run = bin()
        .args([
            "eval",
            &real("ppocr_cls_qdq_u8.onnx"),
            "--reference",
            &real("ppocr_cls_fp32.onnx"),
        ])
        .arg("--dataset")
        .arg(set)
        .args(["--task", "agree", "-t", "cpu", "--no-config", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

/// `plan` with `args`, then `--` and `command`; must succeed; its stdout.
pub(crate) fn plan(args: &[&str], command: &[String]) -> String {
    let out = bin().arg("plan").args(args).arg("--").args(command).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// The words a shell makes of `line`, read back by bash itself.
fn shell_words(line: &str) -> Vec<String> {
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("printf '%s\\n' {line}")])
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// The arguments a job runs with: the command's name, the job's `flags`, then the rest of the
/// user's `words` (the job's own flags first, so a `--` among the user's cannot swallow them).
fn job_args(words: &[String], flags: &[&str]) -> Vec<String> {
    let mut args = vec![words[0].clone()];
    args.extend(flags.iter().map(|f| f.to_string()));
    args.extend(words[1..].iter().cloned());
    args
}

/// The weights a `--costs` value names.
fn weights_of(costs: &str) -> BTreeMap<String, u64> {
    costs
        .split(',')
        .map(|item| {
            let (run, w) = item.rsplit_once('=').unwrap();
            (run.to_string(), w.parse().unwrap())
        })
        .collect()
}

#[test]
fn eval_units_cover_every_sample_of_every_run_once_at_even_cost() {
    let dir = tempdir();
    let set = set(dir.path(), 13);
    let words = eval_words(&set);
    let matrix: Value = serde_json::from_str(&plan(&["--shards", "3", "--format", "json"], &words)).unwrap();
    let include = matrix["include"].as_array().unwrap();
    assert_eq!(include.len(), 3);
    // The defaults per backend (docs/scale.md): CPU EP 1, OpenVINO 2, the QNN simulator 700.
    let costs = "cpu=1,cpu:noopt=1,openvino=2,qnn:sm8650=700";
    let weights = weights_of(costs);
    let total: u64 = weights.values().map(|w| w * 13).sum();
    let mut covered: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for (i, entry) in include.iter().enumerate() {
        let (index, part) = (i + 1, format!("{}/3", i + 1));
        assert_eq!(entry["shard"], part.as_str());
        assert_eq!(entry["index"], index);
        let mut cost = 0;
        for u in entry["units"].as_array().unwrap() {
            let (run, start, end) = (
                u["run"].as_str().unwrap(),
                num(&u["start"]) as u64,
                num(&u["end"]) as u64,
            );
            assert!(start < end && end <= 13, "{u}");
            cost += weights[run] * (end - start);
            covered.entry(run.to_string()).or_default().push((start, end));
        }
        assert_eq!(num(&entry["cost"]) as u64, cost, "{entry}");
        assert_close("share", num(&entry["share"]), cost as f64 / total as f64, 1e-12);
        // No shard is more than one of the costliest samples away from an even share.
        assert!(cost.abs_diff(total / 3) <= 700, "shard {index}: {cost} of {total}");
        // The command, read back by a shell: the name, the shard's flags, the words as given.
        let (out, records) = (format!("shard-{index}.json"), format!("shard-{index}.records"));
        let mut want: Vec<String> = vec!["npu-audit".into()];
        let flags = ["--shard", &part, "--costs", costs, "--out", &out, "--records", &records];
        want.extend(job_args(&words, &flags));
        assert_eq!(shell_words(entry["command"].as_str().unwrap()), want);
    }
    assert_eq!(covered.keys().collect::<Vec<_>>(), weights.keys().collect::<Vec<_>>());
    for (run, mut ranges) in covered {
        ranges.sort();
        let mut next = 0;
        for (start, end) in ranges {
            assert_eq!(start, next, "{run}: a gap or an overlap at sample {start}");
            next = end;
        }
        assert_eq!(next, 13, "{run}");
    }
}

#[test]
fn measured_costs_come_from_a_previous_eval_report() {
    let dir = tempdir();
    let set = set(dir.path(), 4);
    // A real eval's report (cpu and the baseline, cpu:noopt, on the same set), its measured times
    // replaced by known ones and a qnn run added as a copy of cpu's.
    let mut measured = eval_report(dir.path(), &set);
    let cpu = measured["targets"][0].clone();
    let mut qnn = cpu.clone();
    qnn["id"] = "qnn:sm8650".into();
    measured["targets"].as_array_mut().unwrap().push(qnn);
    for t in measured["targets"].as_array_mut().unwrap() {
        let ms = match t["id"].as_str().unwrap() {
            "cpu" => 0.5,
            "cpu:noopt" => 0.8,
            _ => 180.2,
        };
        t["run_ms_median"] = ms.into();
    }
    let report = dir.path().join("measured.json");
    std::fs::write(&report, measured.to_string()).unwrap();
    let mut words = eval_words(&set);
    words.truncate(words.len() - 3); // without openvino: every run measured
    words.push("--no-config".into());
    let text = plan(&["--shards", "2", "--costs-from", report.to_str().unwrap()], &words);
    // Each time over the cheapest (0.5 ms), rounded: 1, 180.2/0.5 = 360.4 -> 360, 0.8/0.5 = 1.6 -> 2.
    assert!(text.contains("--costs cpu=1,cpu:noopt=2,qnn:sm8650=360 "), "{text}");
    assert!(text.contains("measured"), "{text}");
    // The line: cpu's 4 samples (0..4), qnn's 1440 (sample k starts at 4 + 360k: 4, 364, 724,
    // 1084), noopt's 8; 1452 cut at 726, so qnn's first three start in shard 1.
    assert!(text.contains("cpu 0-3, qnn:sm8650 0-2\n"), "{text}");
    assert!(text.contains("qnn:sm8650 3, cpu:noopt 0-3\n"), "{text}");
}

#[test]
fn a_compare_split_runs_as_printed_and_merges() {
    let dir = tempdir();
    let words: Vec<String> = [
        "compare",
        &cnn(),
        "--reference",
        &cnn_fp32(),
        "-t",
        "cpu",
        "-t",
        "cpu:basic",
        "-t",
        "cpu:extended",
        "--no-config",
    ]
    .map(String::from)
    .to_vec();
    let matrix: Value = serde_json::from_str(&plan(&["--shards", "2", "--format", "json"], &words)).unwrap();
    let include = matrix["include"].as_array().unwrap();
    // compare deals targets round robin (k-th to shard k mod n + 1), the baseline to every shard.
    let units = |i: usize| {
        include[i]["units"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(units(0), ["cpu", "cpu:extended", "cpu:noopt"]);
    assert_eq!(units(1), ["cpu:basic", "cpu:noopt"]);
    let tools = tempdir();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_npu-audit"), tools.path().join("npu-audit")).unwrap();
    let path = format!(
        "{}:{}",
        tools.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run_line = |line: &str| {
        let out = std::process::Command::new("bash")
            .args(["-c", line])
            .current_dir(dir.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{line}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for entry in include {
        let command = entry["command"].as_str().unwrap();
        assert!(!command.contains("--costs"), "compare takes no costs: {command}");
        run_line(command);
    }
    run_line("npu-audit merge shard-*.json --out merged.json --format json > /dev/null");
    let merged: Value = serde_json::from_slice(&std::fs::read(dir.path().join("merged.json")).unwrap()).unwrap();
    for id in ["cpu", "cpu:basic", "cpu:extended", "cpu:noopt"] {
        assert_eq!(target(&merged, id)["status"], "ok", "{id}");
    }
}

#[test]
fn the_slurm_script_runs_its_part_with_slurms_variables() {
    let dir = tempdir();
    let set = set(dir.path(), 6);
    let words = eval_words(&set);
    let script = plan(&["--shards", "3", "--format", "slurm"], &words);
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines[0], "#!/bin/bash");
    let first_code = lines.iter().position(|l| !l.starts_with('#')).unwrap();
    let directives: Vec<&str> = lines.iter().filter(|l| l.starts_with("#SBATCH")).copied().collect();
    assert!(directives.contains(&"#SBATCH --array=1-3"), "{script}");
    assert!(lines[..first_code].iter().filter(|l| l.starts_with("#SBATCH")).count() == directives.len());
    for dependency in ["afterok", "afternotok"] {
        assert!(
            script.contains(&format!("--dependency={dependency}:$jobid --kill-on-invalid-dep=yes")),
            "{script}"
        );
    }
    assert!(script.contains("npu-audit merge shards/shard-*.json"));
    // Run it as task 2 of the array (1-based, as its shard) with a stand-in npu-audit that keeps
    // its arguments.
    let stub = dir.path().join("stub");
    std::fs::create_dir(&stub).unwrap();
    std::fs::write(stub.join("npu-audit"), "#!/bin/sh\nprintf '%s\\n' \"$@\" > args.txt\n").unwrap();
    std::fs::set_permissions(
        stub.join("npu-audit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(dir.path().join("job.sbatch"), &script).unwrap();
    let out = std::process::Command::new("bash")
        .arg("job.sbatch")
        .current_dir(dir.path())
        .env("PATH", format!("{}:/usr/bin:/bin", stub.display()))
        // Task 2 submitted again alone: Slurm calls it an array of one, and it is still part 2/3.
        .env("SLURM_ARRAY_TASK_ID", "2")
        .env("SLURM_ARRAY_TASK_MIN", "2")
        .env("SLURM_ARRAY_TASK_COUNT", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.path().join("shards").is_dir());
    let args = std::fs::read_to_string(dir.path().join("args.txt")).unwrap();
    let want = job_args(
        &words,
        &[
            "--shard",
            "2/3",
            "--costs",
            "cpu=1,cpu:noopt=1,openvino=2,qnn:sm8650=700",
            "--out",
            "shards/shard-2.json",
            "--records",
            "shards/shard-2.records",
        ],
    );
    assert_eq!(args.lines().collect::<Vec<_>>(), want);
}

#[test]
fn the_kubernetes_and_github_recipes_carry_what_their_engines_read() {
    let dir = tempdir();
    let set = set(dir.path(), 6);
    let words = eval_words(&set);
    let costs = "cpu=1,cpu:noopt=1,openvino=2,qnn:sm8650=700";
    let k8s = plan(&["--shards", "3", "--format", "k8s"], &words);
    for line in [
        "kind: Job",
        "  completionMode: Indexed",
        "  completions: 3",
        "  parallelism: 3",
        "              value: \"3\"",
    ] {
        assert!(k8s.lines().any(|l| l == line), "{line}: {k8s}");
    }
    assert!(
        k8s.contains("- name: NPU_AUDIT_SHARD_COUNT\n              value: \"3\""),
        "{k8s}"
    );
    // The command is a flow list, which is JSON: one item per argument, exactly.
    let command = k8s.lines().find_map(|l| l.trim().strip_prefix("command: ")).unwrap();
    let command: Vec<String> = serde_json::from_str(command).unwrap();
    let mut want: Vec<String> = vec!["npu-audit".into()];
    want.extend(job_args(
        &words,
        &[
            "--shard",
            "auto",
            "--costs",
            costs,
            "--out",
            "shard-$(JOB_COMPLETION_INDEX).json",
            "--records",
            "shard-$(JOB_COMPLETION_INDEX).records",
        ],
    ));
    assert_eq!(command, want);
    assert!(k8s
        .lines()
        .all(|l| !l.contains('\t') && (l.len() - l.trim_start().len()) % 2 == 0));

    let github = plan(&["--shards", "3", "--format", "github"], &words);
    for i in 1..=3 {
        assert!(
            github.contains(&format!("          - shard: \"{i}/3\"\n            index: {i}\n")),
            "{github}"
        );
    }
    let want = job_args(&words, &["--shard", "2/3", "--out", "shard-2.json", "--costs", costs]);
    assert_eq!(run_github_job(dir.path(), &github, "2/3", 2), want);
    assert!(github.contains("    needs: npu-audit-shard\n"), "{github}");
    assert!(
        github.contains("      - run: npu-audit merge shard-*.json --out merged.json\n"),
        "{github}"
    );
    assert!(github
        .lines()
        .all(|l| !l.contains('\t') && (l.len() - l.trim_start().len()) % 2 == 0));
}

/// A stand-in `npu-audit` in `dir/stub` that writes its arguments, one per line, to `dir/args.txt`.
fn stub(dir: &Path) -> PathBuf {
    let stub = dir.join("stub");
    std::fs::create_dir_all(&stub).unwrap();
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n",
        dir.join("args.txt").display()
    );
    std::fs::write(stub.join("npu-audit"), script).unwrap();
    std::fs::set_permissions(
        stub.join("npu-audit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    stub
}

/// Runs the shard job of a printed GitHub workflow as the runner would for shard `shard`: its
/// `env:` values set (the matrix expressions replaced), its `run:` script given to bash, with the
/// stand-in `npu-audit`; the arguments it got.
fn run_github_job(dir: &Path, workflow: &str, shard: &str, index: usize) -> Vec<String> {
    let lines: Vec<&str> = workflow.lines().collect();
    let env_at = lines.iter().position(|l| l.trim() == "env:").unwrap();
    let run_at = lines.iter().position(|l| l.trim() == "run: |").unwrap();
    let mut cmd = std::process::Command::new("bash");
    for line in &lines[env_at + 1..run_at] {
        let Some((key, value)) = line.trim().split_once(": ") else {
            continue;
        };
        if key.starts_with('#') {
            continue;
        }
        let value = value
            .replace("${{ matrix.shard }}", shard)
            .replace("${{ matrix.index }}", &index.to_string());
        assert!(
            !value.contains("${{"),
            "an expression the runner would evaluate: {value}"
        );
        cmd.env(key, value);
    }
    let script: Vec<&str> = lines[run_at + 1..]
        .iter()
        .take_while(|l| l.starts_with("          "))
        .map(|l| l.trim())
        .collect();
    let stub = stub(dir);
    let out = cmd
        .args(["-c", &script.join("\n")])
        .env("PATH", format!("{}:/usr/bin:/bin", stub.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let args = std::fs::read_to_string(dir.join("args.txt")).unwrap();
    args.lines().map(String::from).collect()
}

/// A container command's word as the kubelet expands it, left to right: `$$` is `$`,
/// `$(JOB_COMPLETION_INDEX)` is `index`, any other `$(NAME)` stays as written.
fn kubelet_expand(word: &str, index: &str) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("$(JOB_COMPLETION_INDEX)") {
            out.push_str(index);
            rest = after;
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out + rest
}

#[test]
fn untrusted_words_reach_every_engine_as_data() {
    // A dataset directory whose name is an expression, a command substitution and quotes: every
    // recipe hands it to its engine as the word it is, and no GitHub recipe holds a `${{` of it.
    let dir = tempdir();
    let hostile = dir
        .path()
        .join("gh${{ secrets.GITHUB_TOKEN }} $(touch pwned) `id` 'q\" a$$b $$(JOB_COMPLETION_INDEX)");
    std::fs::create_dir(&hostile).unwrap();
    let x = Tensor::new(vec![1, 3, 48, 192], TensorData::Float32(vec![0.0; 3 * 48 * 192])).unwrap();
    for k in 0..4 {
        write_npz(&hostile.join(format!("s{k}.npz")), &[("x".to_string(), &x)]).unwrap();
    }
    let mut words = eval_words(&hostile);
    // A target with options (its id holds commas: the costs are `;`-separated) and a `--` after
    // which the model is named (the job's own flags must come before it).
    words.extend(["-t".into(), "qnn:sm8650,custom=${{ github.token }}".into()]);
    let model = words.remove(1);
    words.extend(["--".into(), model]);
    let costs_of = |text: &str| -> String {
        let line = text.lines().find(|l| l.contains(" --costs ")).unwrap().to_string();
        let w = shell_words(line.trim().trim_start_matches("# ").trim());
        w[w.iter().position(|a| a == "--costs").unwrap() + 1].clone()
    };
    // Table: each job line read back by a shell.
    let table = plan(&["--shards", "2"], &words);
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with("npu-audit eval"))
        .unwrap();
    let costs = costs_of(&table);
    assert!(costs.ends_with(";qnn:sm8650,custom=${{ github.token }}=700"), "{costs}");
    let flags = [
        "--shard",
        "1/2",
        "--costs",
        &costs,
        "--out",
        "shard-1.json",
        "--records",
        "shard-1.records",
    ];
    let want = job_args(&words, &flags);
    assert_eq!(shell_words(line.trim())[1..], want[..]);
    // GitHub: the matrix and the workflow.
    let matrix: Value = serde_json::from_str(&plan(&["--shards", "2", "--format", "json"], &words)).unwrap();
    let command = matrix["include"][0]["command"].as_str().unwrap();
    assert!(!command.contains("${{"), "{command}");
    assert_eq!(shell_words(command)[1..], want[..]);
    let github = plan(&["--shards", "2", "--format", "github"], &words);
    let expressions: Vec<&str> = github.match_indices("${{").map(|(i, _)| &github[i..i + 20]).collect();
    assert!(
        expressions.iter().all(|e| e.starts_with("${{ matrix.")),
        "{expressions:?}\n{github}"
    );
    let want_gh = job_args(&words, &["--shard", "2/2", "--out", "shard-2.json", "--costs", &costs]);
    assert_eq!(run_github_job(dir.path(), &github, "2/2", 2), want_gh);
    // Slurm: the script run as task 1.
    let slurm = plan(&["--shards", "2", "--format", "slurm"], &words);
    std::fs::write(dir.path().join("job.sbatch"), &slurm).unwrap();
    let stub = stub(dir.path());
    let out = std::process::Command::new("bash")
        .arg("job.sbatch")
        .current_dir(dir.path())
        .env("PATH", format!("{}:/usr/bin:/bin", stub.display()))
        .env("SLURM_ARRAY_TASK_ID", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let args = std::fs::read_to_string(dir.path().join("args.txt")).unwrap();
    let want_slurm = job_args(
        &words,
        &[
            "--shard",
            "1/2",
            "--costs",
            &costs,
            "--out",
            "shards/shard-1.json",
            "--records",
            "shards/shard-1.records",
        ],
    );
    assert_eq!(args.lines().collect::<Vec<_>>(), want_slurm);
    assert!(!dir.path().join("pwned").exists());
    // Kubernetes: `$(VAR)` is expanded by the kubelet and `$$` keeps a `$`; as it expands them.
    let k8s = plan(&["--shards", "2", "--format", "k8s"], &words);
    let command = k8s.lines().find_map(|l| l.trim().strip_prefix("command: ")).unwrap();
    let command: Vec<String> = serde_json::from_str(command).unwrap();
    let expanded: Vec<String> = command.iter().map(|a| kubelet_expand(a, "0")).collect();
    let mut want_k8s = vec!["npu-audit".to_string()];
    want_k8s.extend(job_args(
        &words,
        &[
            "--shard",
            "auto",
            "--costs",
            &costs,
            "--out",
            "shard-0.json",
            "--records",
            "shard-0.records",
        ],
    ));
    assert_eq!(expanded, want_k8s);
}

#[test]
fn words_a_recipe_cannot_carry_are_refused() {
    let dir = tempdir();
    let set = set(dir.path(), 2);
    for bad in [
        "a\rb.onnx",
        "a\u{2028}b.onnx",
        "a\u{85}b.onnx",
        "a\u{7f}--flag",
        "a\u{1b}[2Kb.onnx",
    ] {
        let out = bin()
            .args(["plan", "--shards", "2", "--", "eval", bad, "--dataset"])
            .arg(&set)
            .args(["--task", "agree", "--no-config"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(err.contains("a line break or a control character"), "{bad:?}: {err}");
    }
}

#[test]
fn bad_requests_are_refused_in_one_line() {
    let dir = tempdir();
    let set_dir = set(dir.path(), 2);
    let set = set_dir.to_str().unwrap();
    let model = real("ppocr_cls_qdq_u8.onnx");
    let eval = ["eval", &model, "--dataset", set, "--task", "agree", "--no-config"];
    let with = |head: &[&str], tail: &[&str]| {
        let mut v: Vec<&str> = vec!["plan"];
        v.extend_from_slice(head);
        v.push("--");
        v.extend_from_slice(tail);
        v.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    let fails =
        |args: Vec<String>, needle: &str| fails_with(&args.iter().map(String::as_str).collect::<Vec<_>>(), 2, needle);
    fails(with(&["--shards", "0"], &eval), "from 1 to 10000");
    fails(with(&["--shards", "10001"], &eval), "from 1 to 10000");
    fails(
        with(&["--shards", "2"], &[&eval[..], &["--out", "x.json"]].concat()),
        "has --out",
    );
    fails(
        with(&["--shards", "2"], &["compare", &cnn(), "--shard", "1/2"]),
        "has --shard",
    );
    fails(
        with(&["--shards", "2"], &["targets"]),
        "plan splits `eval` and `compare`",
    );
    // --costs requires --shard on eval's own command line; plan names --costs, not --shard.
    fails(
        with(&["--shards", "2"], &[&eval[..], &["--costs", "cpu=1"]].concat()),
        "has --costs",
    );
    fails(
        with(
            &["--shards", "2"],
            &[&eval[..], &["--max-accuracy-drop", "5", "--until-decided"]].concat(),
        ),
        "has --until-decided",
    );
    fails(
        with(&["--shards", "2"], &["compare", &cnn(), "--no-such-flag"]),
        "--no-such-flag",
    );
    fails(
        with(&["--shards", "3"], &["compare", &cnn(), "-t", "cpu", "-t", "cpu:basic"]),
        "1 of the 3 shards would get no work",
    );
    // 2 samples on cpu, qnn and the baseline: 1404, an even share 351 of 4 is less than one qnn sample.
    fails(
        with(
            &["--shards", "4"],
            &[&eval[..], &["-t", "cpu", "-t", "qnn:sm8650"]].concat(),
        ),
        "would get no work",
    );
    fails(with(&["--shards", "300", "--format", "github"], &eval), "at most 256");
    let not_json = dir.path().join("r.json");
    std::fs::write(&not_json, "{\"targets\": []}").unwrap();
    fails(
        with(&["--shards", "2", "--costs-from", not_json.to_str().unwrap()], &eval),
        "not a report npu-audit writes",
    );
    let mut unmeasured = eval_report(dir.path(), &set_dir);
    for t in unmeasured["targets"].as_array_mut().unwrap() {
        t["run_ms_median"] = Value::Null;
    }
    let unmeasured_path = dir.path().join("unmeasured.json");
    std::fs::write(&unmeasured_path, unmeasured.to_string()).unwrap();
    fails(
        with(
            &["--shards", "2", "--costs-from", unmeasured_path.to_str().unwrap()],
            &eval,
        ),
        "no target with a run_ms_median",
    );
    fails(
        with(
            &["--shards", "2"],
            &[
                "eval",
                &model,
                "--dataset",
                "no/such/set",
                "--task",
                "agree",
                "--no-config",
            ],
        ),
        "no/such/set",
    );
}
