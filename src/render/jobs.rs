//! The cluster jobs `plan` prints: an eval or a compare split into jobs, as a table (each shard's units
//! and share of the cost), a GitHub Actions matrix (JSON) or workflow, an sbatch array script, or
//! a Kubernetes Indexed Job. Every command printed runs as printed: the user's arguments are
//! shell-quoted (in the Kubernetes manifest, one list item each, `$(` kept from expansion; in the
//! GitHub workflow, encoded data the script decodes, out of reach of the runner's expressions).

use serde_json::json;

use crate::shard::jobs::JobPlan;
use crate::shard::Unit;

/// The merge of the shard files every recipe ends with (`DIR/` before the files, or nothing).
fn merge_line(dir: &str) -> String {
    format!("npu-audit merge {dir}shard-*.json --out merged.json")
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
    let mut words: Vec<String> = vec!["npu-audit".into()];
    words.extend(p.args.first().map(|a| shell_quote(a)));
    words.extend(["--shard".into(), shard.to_string()]);
    if let Some(costs) = &p.costs {
        words.extend(["--costs".into(), shell_quote(costs)]);
    }
    words.extend(["--out".into(), out.to_string()]);
    words.extend(p.args.iter().skip(1).map(|a| shell_quote(a)));
    words.join(" ")
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
    out += &format!("{:<width$}  {:>cost_width$}  {:>6}  units\n", "shard", "cost", "share");
    for (i, units) in p.shards.iter().enumerate() {
        let cost = p.cost(units);
        out += &format!(
            "{:<width$}  {cost:>cost_width$}  {:>5.1}%  {}\n",
            format!("{}/{n}", i + 1),
            cost as f64 * 100.0 / total as f64,
            units_text(p, units)
        );
    }
    out += &format!("max/mean cost {:.2} (1.00: an even split)\n\njobs\n", p.max_over_mean());
    for i in 1..=n {
        out += &format!("  {}\n", job_line(p, &format!("{i}/{n}"), &format!("shard-{i}.json")));
    }
    out += &format!("then\n  {}\n", merge_line(""));
    out
}

/// A GitHub Actions matrix (`strategy.matrix: ${{ fromJSON(...) }}`): one entry per shard with
/// its part, index, units, cost, share of the total and the exact command.
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
         # README \"Install\") and the model and the set in the checkout.\n\
         jobs:\n  npu-audit-shard:\n    runs-on: ubuntu-latest\n    strategy:\n      fail-fast: false\n      matrix:\n        include:\n",
        p.command()
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
    out += "  npu-audit-merge:\n    needs: npu-audit-shard\n    if: always()\n    runs-on: ubuntu-latest\n    steps:\n      \
            - uses: actions/checkout@v4\n      - uses: actions/download-artifact@v4\n        with:\n          \
            pattern: npu-audit-shard-*\n          merge-multiple: true\n";
    out += &format!("      - run: {}\n", merge_line(""));
    out += "      - uses: actions/upload-artifact@v4\n        with:\n          name: npu-audit-merged\n          path: merged.json\n";
    out
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

/// An sbatch script: a job array of N tasks, each running its part with `--shard auto`, and how
/// to submit it with the merge as a job that waits for every task.
pub fn slurm(p: &JobPlan) -> String {
    let n = p.shards.len();
    let mut out = format!(
        "#!/bin/bash\n# {n} shards of `npu-audit {}` (npu-audit plan --format slurm).\n\
         # Submit from the directory the command's paths are relative to, with npu-audit on PATH:\n\
         #   jobid=$(sbatch --parsable npu-audit.sbatch)\n\
         #   sbatch --dependency=afterany:$jobid --job-name=npu-audit-merge --output=npu-audit-merge.out --wrap='{}'\n",
        p.command(),
        merge_line("shards/")
    );
    if n > 1000 {
        out += "# Slurm's default MaxArraySize is 1001: raise it in slurm.conf for this array.\n";
    }
    out += &format!(
        "#SBATCH --job-name=npu-audit\n#SBATCH --array=0-{}\n#SBATCH --output=npu-audit-shard-%a.out\n\
         set -euo pipefail\nmkdir -p shards\n{}\n",
        n - 1,
        job_line(p, "auto", "\"shards/shard-${SLURM_ARRAY_TASK_ID}.json\"")
    );
    out
}

/// A Kubernetes Indexed Job: N completions run at once, each with `--shard auto` (the index from
/// `JOB_COMPLETION_INDEX`, the count from `NPU_AUDIT_SHARD_COUNT`), writing into a shared volume.
pub fn k8s(p: &JobPlan) -> String {
    let n = p.shards.len();
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
    command.extend(p.args.iter().skip(1).map(|a| item(a)));
    format!(
        "# {n} shards of `npu-audit {cmd}` (npu-audit plan --format k8s).\n\
         # IMAGE: an image with npu-audit, python3 and pip. The volume npu-audit-work holds the model\n\
         # and the set; every index writes shard-INDEX.json there. Once the Job completes, in /work:\n\
         #   {merge}\n\
         apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: npu-audit-{cmd}\nspec:\n  completionMode: Indexed\n  \
         completions: {n}\n  parallelism: {n}\n  backoffLimit: {n}\n  template:\n    spec:\n      restartPolicy: Never\n      \
         containers:\n        - name: npu-audit\n          image: IMAGE\n          workingDir: /work\n          env:\n            \
         - name: NPU_AUDIT_SHARD_COUNT\n              value: \"{n}\"\n            - name: JOB_COMPLETION_INDEX\n              \
         valueFrom:\n                fieldRef:\n                  \
         fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']\n          \
         command: [{command}]\n          volumeMounts:\n            - name: work\n              mountPath: /work\n      \
         volumes:\n        - name: work\n          persistentVolumeClaim:\n            claimName: npu-audit-work\n",
        cmd = p.command(),
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
