//! The cluster jobs `plan` prints: an eval or a compare split into jobs, as a table (each shard's units
//! and share of the cost), a GitHub Actions matrix (JSON) or workflow, an sbatch array script, or
//! a Kubernetes Indexed Job, every job with the CPUs, memory and time the plan sizes (Slurm's
//! `#SBATCH` lines, the container's requests and limits and the pod's deadline, GitHub's
//! `timeout-minutes`). Every command printed runs as printed: the user's arguments are
//! shell-quoted (in the Kubernetes manifest, one list item each, `$(` kept from expansion; in the
//! GitHub workflow, encoded data the script decodes, out of reach of the runner's expressions).

use serde_json::json;

use super::present::duration;
use crate::commands::shard::jobs::JobPlan;
use crate::commands::shard::limits::{k8s_mem, minutes, slurm_mem, slurm_time};
use crate::commands::shard::resources::{TimesFrom, SAFETY, SETUP_SECONDS};
use crate::commands::shard::Unit;

/// The time limit of a merge job, minutes: `merge` reads the shards' files (0.04 s for 2000
/// samples' records in docs/scale.md's benchmark); this covers fetching them and a large set.
const MERGE_MINUTES: u64 = 10;

/// The merge of the shard files every recipe ends with (`DIR/` before the files, or nothing).
fn merge_line(dir: &str) -> String {
    format!("npu-audit merge {dir}shard-*.json --out merged.json")
}

/// What every job asks for, for a person: `4 CPUs, 768M of memory and 0:06:00`.
fn request_words(p: &JobPlan) -> String {
    let r = p.sizing.request;
    format!(
        "{} CPU{}, {} of memory and {}",
        r.cpus,
        if r.cpus == 1 { "" } else { "s" },
        slurm_mem(r.mem_mib),
        slurm_time(r.seconds)
    )
}

/// Which of the request's figures the user gave and which were estimated.
fn origin_words(p: &JobPlan) -> String {
    let (cpus, mem, time) = p.sizing.given;
    let names = |want: bool| {
        [(cpus, "CPUs"), (mem, "memory"), (time, "time")]
            .iter()
            .filter(|(given, _)| *given == want)
            .map(|(_, name)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (names(true), names(false)) {
        (given, estimated) if given.is_empty() => format!("{estimated} estimated: docs/scale.md, \"Resources\""),
        (given, estimated) if estimated.is_empty() => format!("{given} as given"),
        (given, estimated) => format!("{given} as given; {estimated} estimated: docs/scale.md, \"Resources\""),
    }
}

/// Where an estimated time limit comes from, and how to get a measured one; `None` when the
/// user gave it.
fn time_origin(p: &JobPlan) -> Option<String> {
    if p.sizing.given.2 {
        return None;
    }
    let costliest = p.sizing.shard_seconds.iter().copied().fold(0.0, f64::max);
    let times = match p.sizing.times {
        TimesFrom::Defaults => {
            "default times per sample of each backend, for a small model (--costs-from EVAL.json measures them)"
        }
        TimesFrom::Measured => "the times per sample measured in --costs-from",
        TimesFrom::Mixed => "the times per sample measured in --costs-from, defaults for the runs it lacks",
    };
    Some(format!(
        "{} min setup + {SAFETY} x the costliest shard's {} of samples at {times}",
        SETUP_SECONDS / 60,
        duration(costliest)
    ))
}

/// `text` quoted for a POSIX shell when it needs it. A `${{` inside is written `$''{{` (the same
/// word to a shell: two quoted strings side by side), so that no recipe holds the sequence a CI
/// runner would evaluate as an expression before the shell sees it.
pub fn shell_quote(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''").replace("${{", "$''{{"))
}

/// One job's command line: the command's name, `--shard`, `--costs` and `--out` (with `shard`
/// and `out` as given: the caller's shell text, a variable, a placeholder), then the user's
/// arguments quoted. The job's own flags come first, so a `--` among the user's arguments
/// cannot make them positional.
pub fn job_line(p: &JobPlan, shard: &str, out: &str) -> String {
    job_words(p, shard, out).join(" ")
}

/// `--records` beside a shard's `--out` (`shard-2.json` → `shard-2.records`) for an eval
/// whose command names none: an eval keeps its records in the machine's cache by default, and a
/// retried shard may run on another node or in a fresh container, where only the shared volume
/// its file is written to still holds them.
fn records_words(p: &JobPlan, out: &str) -> Vec<String> {
    let named = p.args.iter().any(|a| a == "--records" || a.starts_with("--records="));
    if p.command() != "eval" || named {
        return Vec::new();
    }
    let records = match out.strip_suffix(".json\"") {
        Some(stem) => format!("{stem}.records\""),
        None => format!("{}.records", out.strip_suffix(".json").unwrap_or(out)),
    };
    vec!["--records".into(), records]
}

/// The shell words of [`job_line`], each quoted.
fn job_words(p: &JobPlan, shard: &str, out: &str) -> Vec<String> {
    let mut words: Vec<String> = vec!["npu-audit".into()];
    words.extend(p.args.first().map(|a| shell_quote(a)));
    words.extend(["--shard".into(), shard.to_string()]);
    if let Some(costs) = &p.costs {
        words.extend(["--costs".into(), shell_quote(costs)]);
    }
    words.extend(["--out".into(), out.to_string()]);
    words.extend(records_words(p, out));
    words.extend(p.args.iter().skip(1).map(|a| shell_quote(a)));
    words
}

/// The units of a shard as text: `cpu 0-7, qnn:sm8650 0-3` (samples inclusive), or the
/// targets alone for compare.
pub fn units_text(p: &JobPlan, units: &[Unit]) -> String {
    units
        .iter()
        .map(|u| match p.samples {
            Some(_) if u.end == u.start + 1 => format!("{} {}", u.run, u.start),
            Some(_) => format!("{} {}-{}", u.run, u.start, u.end.saturating_sub(1)),
            None => u.run.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The split for a person: the weights, each shard's cost, share and units, the balance, and
/// every job's command with the merge after them.
pub fn table(p: &JobPlan) -> String {
    let n = p.shards.len();
    let total = p.total().max(1);
    let mut out = match p.samples {
        Some(samples) => format!(
            "plan     {}: {samples} samples x {} runs in {n} shards\n",
            p.command(),
            p.weights.len()
        ),
        None => format!(
            "plan     {}: {} runs dealt to {n} shards (its targets in turn, the baseline to every shard)\n",
            p.command(),
            p.weights.len()
        ),
    };
    let weights: Vec<String> = p.weights.iter().map(|(r, w)| format!("{r}={w}")).collect();
    out += &format!("costs    {} ({})\n\n", weights.join(" "), p.weights_from);
    let width = format!("{n}/{n}").len().max(5);
    let cost_width = p
        .shards
        .iter()
        .map(|s| p.cost(s).to_string().len())
        .max()
        .unwrap_or(4)
        .max(4);
    out += &format!(
        "{:<width$}  {:>cost_width$}  {:>6}  {:>8}  units\n",
        "shard", "cost", "share", "time"
    );
    for (i, units) in p.shards.iter().enumerate() {
        let cost = p.cost(units);
        out += &format!(
            "{:<width$}  {cost:>cost_width$}  {:>5.1}%  {:>8}  {}\n",
            format!("{}/{n}", i + 1),
            cost as f64 * 100.0 / total as f64,
            duration(p.sizing.shard_seconds.get(i).copied().unwrap_or(0.0)),
            units_text(p, units)
        );
    }
    out += &format!("max/mean cost {:.2} (1.00: an even split)\n", p.max_over_mean());
    out += &format!("resources {} for each job ({})\n", request_words(p), origin_words(p));
    if let Some(origin) = time_origin(p) {
        out += &format!("time      {origin}\n");
    }
    // The figures wrap to the terminal; a command wraps with ` \` continuations, still one command.
    let mut out = super::grid::prose(&out);
    out += "\njobs\n";
    for i in 1..=n {
        let words = job_words(p, &format!("{i}/{n}"), &format!("shard-{i}.json"));
        out += &format!("{}\n", super::grid::command(&words, 2));
    }
    out += &format!("then\n  {}\n", merge_line(""));
    out
}

/// A GitHub Actions matrix (`strategy.matrix: ${{ fromJSON(...) }}`): one entry per shard with
/// its part, index, units, cost, share of the total, expected seconds of samples, the exact
/// command and what every job asks for (`cpus`, `mem_mib`, `minutes`).
pub fn matrix_json(p: &JobPlan) -> String {
    let n = p.shards.len();
    let total = p.total().max(1);
    let include: Vec<serde_json::Value> = p
        .shards
        .iter()
        .enumerate()
        .map(|(i, units)| {
            let cost = p.cost(units);
            let mut entry = json!({
                "shard": format!("{}/{n}", i + 1),
                "index": i + 1,
                "cost": cost,
                "share": cost as f64 / total as f64,
                "command": job_line(p, &format!("{}/{n}", i + 1), &format!("shard-{}.json", i + 1)),
                "estimated_seconds": p.sizing.shard_seconds.get(i).map(|s| s.ceil()),
                "cpus": p.sizing.request.cpus,
                "mem_mib": p.sizing.request.mem_mib,
                "minutes": minutes(p.sizing.request.seconds),
            });
            entry["units"] = match p.samples {
                Some(_) => json!(units),
                None => json!(units.iter().map(|u| &u.run).collect::<Vec<_>>()),
            };
            entry
        })
        .collect();
    let text = serde_json::to_string_pretty(&json!({ "include": include })).unwrap_or_default();
    text + "\n"
}

/// A GitHub Actions workflow: one matrix job per shard that uploads its file, and a merge job.
///
/// The runner evaluates `${{ … }}` anywhere in a workflow's values, and a `run:` script is shell
/// text: a path such as `gh${{ secrets.GITHUB_TOKEN }}` written there would put the secret in the
/// command line and the reports. So the user's words never appear in the workflow: they travel
/// NUL-separated and base64-encoded (no `$`, `{`, quote or space in it) in an `env:` value, and the
/// script decodes them into an array it quotes.
pub fn github(p: &JobPlan) -> String {
    let n = p.shards.len();
    let mut out = format!(
        "# {n} shards of `npu-audit {}` (npu-audit plan --format github; `--format table` prints each\n\
         # job's command). Each job needs npu-audit on PATH (e.g. `pipx install npu_audit-*.whl`,\n\
         # README \"Install\") and the model and the set in the checkout.\n",
        p.command()
    );
    out += &format!("{}jobs:\n", resource_comment(p, "job", "timeout-minutes"));
    out += &format!(
        "  npu-audit-shard:\n    runs-on: ubuntu-latest\n    timeout-minutes: {}\n    strategy:\n      \
         fail-fast: false\n      matrix:\n        include:\n",
        minutes(p.sizing.request.seconds)
    );
    for i in 1..=n {
        out += &format!("          - shard: \"{i}/{n}\"\n            index: {i}\n");
    }
    out += "    steps:\n      - uses: actions/checkout@v4\n      - name: shard ${{ matrix.shard }}\n        env:\n";
    out += "          # The command's words after `npu-audit`, NUL-separated, base64: data, never an expression.\n";
    out += &format!("          NPU_AUDIT_ARGS: {}\n", encoded_words(p));
    out += "          NPU_AUDIT_SHARD: ${{ matrix.shard }}\n          NPU_AUDIT_OUT: shard-${{ matrix.index }}.json\n";
    out +=
        "        run: |\n          mapfile -d '' -t args < <(printf '%s' \"$NPU_AUDIT_ARGS\" | base64 -d)\n          \
            npu-audit \"${args[0]}\" --shard \"$NPU_AUDIT_SHARD\" --out \"$NPU_AUDIT_OUT\" \"${args[@]:1}\"\n";
    out += "      - uses: actions/upload-artifact@v4\n        if: always()\n        with:\n          \
            name: npu-audit-shard-${{ matrix.index }}\n          path: shard-${{ matrix.index }}.json\n";
    out += &format!(
        "  npu-audit-merge:\n    needs: npu-audit-shard\n    if: always()\n    runs-on: ubuntu-latest\n    \
         timeout-minutes: {MERGE_MINUTES}\n    steps:\n      - uses: actions/checkout@v4\n      \
         - uses: actions/download-artifact@v4\n        with:\n          pattern: npu-audit-shard-*\n          \
         merge-multiple: true\n"
    );
    out += &format!("      - run: {}\n", merge_line(""));
    out += "      - uses: actions/upload-artifact@v4\n        with:\n          name: npu-audit-merged\n          path: merged.json\n";
    out
}

/// The comment lines that say what every job asks for and where it comes from: `who` names a job
/// as its engine does (task, pod, job); `limit` is the recipe's field of the time limit. GitHub is
/// not asked for CPUs or memory: its runner is chosen by label.
fn resource_comment(p: &JobPlan, who: &str, limit: &str) -> String {
    let github = limit == "timeout-minutes";
    let verb = if github { "needs" } else { "asks for" };
    let mut text = format!("Each {who} {verb} {} ({}).", request_words(p), origin_words(p));
    if github {
        text += " GitHub is not asked for CPUs or memory: runs-on must name a runner that has them (a larger runner's label, or a self-hosted runner's).";
    }
    if let Some(origin) = time_origin(p) {
        text += &format!(" {limit}: {origin}.");
    }
    comment(&text)
}

/// `text` as shell and YAML comment lines of at most 100 columns, broken between words.
fn comment(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() > 1 && line.len() + 1 + word.len() > 100 {
            out += &line;
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out + &line + "\n"
}

/// The command's name, `--costs` and the user's words (everything a job runs but `--shard` and
/// `--out`, which the script puts after the name), each ended by a NUL, in base64.
fn encoded_words(p: &JobPlan) -> String {
    use base64::Engine as _;
    let mut bytes = Vec::new();
    let costs = p.costs.iter().flat_map(|c| ["--costs".to_string(), c.clone()]);
    let words = p
        .args
        .first()
        .cloned()
        .into_iter()
        .chain(costs)
        .chain(p.args.iter().skip(1).cloned());
    for word in words {
        bytes.extend_from_slice(word.as_bytes());
        bytes.push(0);
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An sbatch script: a job array of N tasks (numbered from 1, as the shards and their files are),
/// each asking for the plan's CPUs, memory and time and running part `$SLURM_ARRAY_TASK_ID/N` (the
/// task's own number, not `--shard auto`: a task submitted again alone, `--array=K`, is an array of
/// one to Slurm, yet still part K);
/// and how to submit it with the merge as a job that waits for every task. The merge that runs
/// when every task succeeded (`afterok`) has a twin for when one failed (`afternotok`), so a
/// merge always runs and says which shards are missing; each is cancelled once its condition
/// cannot be met (`--kill-on-invalid-dep`), instead of waiting in the queue for ever.
pub fn slurm(p: &JobPlan) -> String {
    let n = p.shards.len();
    let r = p.sizing.request;
    let merge = |dependency: &str, name: &str| {
        format!(
            "#   sbatch --dependency={dependency}:$jobid --kill-on-invalid-dep=yes --time={MERGE_MINUTES} \
             --job-name={name} --output=npu-audit-merge.out --wrap='{}'\n",
            merge_line("shards/")
        )
    };
    let mut out = format!(
        "#!/bin/bash\n# {n} shards of `npu-audit {}` (npu-audit plan --format slurm).\n{}\
         # Submit from the directory the command's paths are relative to, with npu-audit on PATH:\n\
         #   jobid=$(sbatch --parsable npu-audit.sbatch)\n{}{}\
         # One of the two merges runs: the first when every task succeeded, the second when one\n\
         # failed (merge then names the shards whose files are missing, in npu-audit-merge.out).\n\
         # Submitted again, the array runs what is left: an eval shard whose file is complete runs\n\
         # nothing, a killed one resumes from its records; one task alone: sbatch --array=K.\n",
        p.command(),
        resource_comment(p, "task", "--time"),
        merge("afterok", "npu-audit-merge"),
        merge("afternotok", "npu-audit-merge-partial"),
    );
    if n > 1000 {
        out += "# Slurm's default MaxArraySize is 1001: raise it in slurm.conf for this array.\n";
    }
    out += &format!(
        "#SBATCH --job-name=npu-audit\n#SBATCH --array=1-{n}\n#SBATCH --cpus-per-task={}\n#SBATCH --mem={}\n\
         #SBATCH --time={}\n#SBATCH --output=npu-audit-shard-%a.out\nset -euo pipefail\nmkdir -p shards\n{}\n",
        r.cpus,
        slurm_mem(r.mem_mib),
        slurm_time(r.seconds),
        job_line(
            p,
            &format!("\"${{SLURM_ARRAY_TASK_ID}}/{n}\""),
            "\"shards/shard-${SLURM_ARRAY_TASK_ID}.json\""
        )
    );
    out
}

/// A Kubernetes Indexed Job: N completions run at once, each with `--shard auto` (the index from
/// `JOB_COMPLETION_INDEX`, the count from `NPU_AUDIT_SHARD_COUNT`), writing into a shared volume.
/// The container's requests are its limits: npu-audit starts as many sessions as the CPUs it sees,
/// and a CPU limit is what bounds those (with no limit it would see the node's every core, and
/// outgrow its memory). The deadline is each pod's (`activeDeadlineSeconds` of the pod
/// template), counted from its start: a deadline of the Job would count the time its pods wait
/// for room in the cluster too.
pub fn k8s(p: &JobPlan) -> String {
    let n = p.shards.len();
    let r = p.sizing.request;
    // Kubernetes expands `$(VAR)` in a command and reads `$$` as `$`: every `$` of the user's
    // text is written `$$`, so none of it is expanded.
    let item = |s: &str| serde_json::to_string(&s.replace('$', "$$")).unwrap_or_default();
    let mut command: Vec<String> = vec![item("npu-audit")];
    command.extend(p.args.first().map(|a| item(a)));
    command.extend(["\"--shard\"".into(), "\"auto\"".into()]);
    if let Some(costs) = &p.costs {
        command.extend(["\"--costs\"".into(), item(costs)]);
    }
    command.extend(["\"--out\"".into(), "\"shard-$(JOB_COMPLETION_INDEX).json\"".into()]);
    for word in records_words(p, "shard-$(JOB_COMPLETION_INDEX).json") {
        command.push(serde_json::to_string(&word).unwrap_or_default());
    }
    command.extend(p.args.iter().skip(1).map(|a| item(a)));
    format!(
        "# {n} shards of `npu-audit {cmd}` (npu-audit plan --format k8s).\n{resources}\
         # Requests are limits: npu-audit starts as many sessions as the CPUs its limit gives it.\n\
         # IMAGE: an image with npu-audit, python3 and pip. The volume npu-audit-work holds the model\n\
         # and the set; every index writes shard-INDEX.json there. Once the Job completes, in /work:\n\
         #   {merge}\n\
         apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: npu-audit-{cmd}\nspec:\n  completionMode: Indexed\n  \
         completions: {n}\n  parallelism: {n}\n  backoffLimit: {n}\n  template:\n    spec:\n      restartPolicy: Never\n      \
         activeDeadlineSeconds: {seconds}\n      \
         containers:\n        - name: npu-audit\n          image: IMAGE\n          workingDir: /work\n          \
         resources:\n            requests:\n              cpu: \"{cpus}\"\n              memory: {mem}\n            \
         limits:\n              cpu: \"{cpus}\"\n              memory: {mem}\n          env:\n            \
         - name: NPU_AUDIT_SHARD_COUNT\n              value: \"{n}\"\n            - name: JOB_COMPLETION_INDEX\n              \
         valueFrom:\n                fieldRef:\n                  \
         fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']\n          \
         command: [{command}]\n          volumeMounts:\n            - name: work\n              mountPath: /work\n      \
         volumes:\n        - name: work\n          persistentVolumeClaim:\n            claimName: npu-audit-work\n",
        cmd = p.command(),
        resources = resource_comment(p, "pod", "activeDeadlineSeconds (each pod's)"),
        seconds = r.seconds,
        cpus = r.cpus,
        mem = k8s_mem(r.mem_mib),
        merge = merge_line(""),
        command = command.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_plain_words_and_quotes_the_rest() {
        assert_eq!(shell_quote("fixtures/a.onnx"), "fixtures/a.onnx");
        assert_eq!(shell_quote("cpu=1,qnn:sm8650=700"), "cpu=1,qnn:sm8650=700");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("qnn:8 Gen 3"), "'qnn:8 Gen 3'");
        assert_eq!(shell_quote("gh${{ secrets.X }}"), "'gh$''{{ secrets.X }}'");
    }
}
