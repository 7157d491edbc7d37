//! `--shard auto`: the part an array job is, read from the variables of the cluster engine that
//! started it.

use anyhow::Result;

use super::{Shard, MAX_SHARDS};
use crate::foundation::error::bad_flag;

/// The variable a job may name its shard count with when its engine gives only an index
/// (Kubernetes Indexed Jobs, AWS Batch array jobs).
pub const COUNT_VAR: &str = "NPU_AUDIT_SHARD_COUNT";

/// A cluster engine's variables for an array job's index and size: (engine, index variable,
/// whether the index is 1-based, count variable; `None` when the engine sets no count).
pub(super) const ENGINES: &[(&str, &str, bool, Option<&str>)] = &[
    ("Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", false, None),
    (
        "Slurm job array",
        "SLURM_ARRAY_TASK_ID",
        false,
        Some("SLURM_ARRAY_TASK_COUNT"),
    ),
    ("GitLab parallel", "CI_NODE_INDEX", true, Some("CI_NODE_TOTAL")),
    (
        "Buildkite parallelism",
        "BUILDKITE_PARALLEL_JOB",
        false,
        Some("BUILDKITE_PARALLEL_JOB_COUNT"),
    ),
    ("AWS Batch array job", "AWS_BATCH_JOB_ARRAY_INDEX", false, None),
    (
        "Google Cloud Batch",
        "BATCH_TASK_INDEX",
        false,
        Some("BATCH_TASK_COUNT"),
    ),
];

/// The shard every engine whose index variable is set says this job is (refused when an engine's
/// variables are not an index within a count).
pub(super) fn engine_shards(get: &dyn Fn(&str) -> Option<String>) -> Result<Vec<(&'static str, Shard)>> {
    let number = |var: &str, text: &str| {
        text.trim()
            .parse::<usize>()
            .map_err(|_| bad_flag(format!("--shard: {var}='{text}' is not a number")))
    };
    let mut found = Vec::new();
    for &(engine, index_var, one_based, count_var) in ENGINES {
        let Some(index_text) = get(index_var).filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        let mut index = number(index_var, &index_text)?;
        if engine.starts_with("Slurm") {
            // An array `--array=1-8` numbers its tasks from 1: the index counts from the first.
            let min = get("SLURM_ARRAY_TASK_MIN")
                .map(|m| number("SLURM_ARRAY_TASK_MIN", &m))
                .transpose()?;
            index = index.checked_sub(min.unwrap_or(0)).ok_or_else(|| {
                bad_flag(format!(
                    "--shard: SLURM_ARRAY_TASK_ID={index} is below SLURM_ARRAY_TASK_MIN"
                ))
            })?;
            if get("SLURM_ARRAY_TASK_STEP").is_some_and(|s| s.trim() != "1") {
                return Err(bad_flag(
                    "--shard auto: the Slurm array's step is not 1; submit it as plan prints it (--array=1-N)",
                ));
            }
        }
        let (count_name, count_text) = match count_var.and_then(|v| get(v).map(|t| (v, t))) {
            Some(found) => found,
            None => match get(COUNT_VAR) {
                Some(t) => (COUNT_VAR, t),
                None => {
                    return Err(bad_flag(format!(
                        "--shard: the {engine} sets {index_var} but not how many parts there are: set {COUNT_VAR} to the job's count"
                    )))
                }
            },
        };
        let count = number(count_name, &count_text)?;
        let index = if one_based { index } else { index + 1 };
        if count == 0 || index == 0 || index > count || count > MAX_SHARDS {
            return Err(bad_flag(format!(
                "--shard: {index_var}={} is not a part of {count_name}={count} (at most {MAX_SHARDS} parts)",
                index_text.trim()
            )));
        }
        found.push((engine, Shard { index, count }));
    }
    Ok(found)
}
