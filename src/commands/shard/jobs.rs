//! The jobs a split makes, as `plan` prints them: what every job runs and each shard's share of
//! the cost. `eval`'s parts are the ones its own `--shard` run takes ([`super::units`]),
//! `compare`'s the deal of its targets ([`super::Shard::deal`]); `render::jobs` writes them for
//! each cluster engine, each job with the CPUs, memory and time [`super::resources`] sizes.

use std::collections::BTreeMap;

use anyhow::Result;

use super::resources::{size, Overrides, Sizing, Workload};
use super::{default_cost, units, Costs, Shard, Unit};
use crate::data::target::TargetRole;
use crate::execution::exec::selection::Requested;
use crate::foundation::error::bad_flag;

/// A split as `plan` made it: what every job runs and each shard's share. The renderers' input.
#[derive(Debug, Clone)]
pub struct JobPlan {
    /// The user's command as given after `--`, its name (`eval`, `compare`) first.
    pub args: Vec<String>,
    /// Samples per run (eval); `None` for compare, whose units are whole targets.
    pub samples: Option<usize>,
    /// Every run with its cost of one sample, in the order the jobs lay them out.
    pub weights: Vec<(String, u64)>,
    /// Where the weights come from, said in the table.
    pub weights_from: String,
    /// The `--costs` every job gets (eval only: compare splits its targets without weights).
    pub costs: Option<String>,
    /// Each shard's units (compare: one per target, samples `0..1`).
    pub shards: Vec<Vec<Unit>>,
    /// What every job asks its engine for, and each shard's expected time.
    pub sizing: Sizing,
}

impl JobPlan {
    /// The command's name: `eval` or `compare`.
    pub fn command(&self) -> &str {
        self.args.first().map_or("", String::as_str)
    }

    fn weight(&self, run: &str) -> u64 {
        self.weights.iter().find(|(r, _)| r == run).map_or(0, |(_, w)| *w)
    }

    /// A shard's cost: its units' samples times their runs' weights.
    pub fn cost(&self, units: &[Unit]) -> u64 {
        units
            .iter()
            .map(|u| self.weight(&u.run) * (u.end - u.start) as u64)
            .sum()
    }

    /// The cost of the whole work (compare's baseline counted in every shard that runs it).
    pub fn total(&self) -> u64 {
        self.shards.iter().map(|s| self.cost(s)).sum()
    }

    /// The costliest shard's cost over the mean: 1.00 is an even split.
    pub fn max_over_mean(&self) -> f64 {
        let max = self.shards.iter().map(|s| self.cost(s)).max().unwrap_or(0);
        let mean = self.total() as f64 / self.shards.len().max(1) as f64;
        if mean > 0.0 {
            max as f64 / mean
        } else {
            1.0
        }
    }
}

/// Every run's weight: measured times (median milliseconds per sample, by target id) over the
/// cheapest measured one (so it weighs 1), else the default of its backend; and a note of where
/// they come from.
pub fn weights(runs: &[Requested], measured: Option<&BTreeMap<String, f64>>) -> (Vec<(String, u64)>, String) {
    let Some(times) = measured else {
        let list = runs
            .iter()
            .map(|r| (r.spec.id.clone(), default_cost(&r.spec)))
            .collect();
        return (list, "a sample's cost; defaults per backend, docs/scale.md".into());
    };
    let cheapest = times.values().copied().fold(f64::INFINITY, f64::min);
    let mut defaulted = Vec::new();
    let list = runs
        .iter()
        .map(|r| {
            let weight = match times.get(&r.spec.id) {
                Some(ms) => (ms / cheapest).round().clamp(1.0, 1e9) as u64,
                None => {
                    defaulted.push(r.spec.id.clone());
                    default_cost(&r.spec)
                }
            };
            (r.spec.id.clone(), weight)
        })
        .collect();
    let mut from = "a sample's cost; measured: median time per sample over the cheapest's".to_string();
    if !defaulted.is_empty() {
        from += &format!("; not in the report, default per backend: {}", defaulted.join(", "));
    }
    (list, from)
}

/// An eval's jobs: every run over the set's `samples`, cut by cost into `count` shards exactly as
/// each `eval --shard i/n` cuts them.
pub fn eval_jobs(
    args: Vec<String>,
    runs: &[Requested],
    (samples, count): (usize, usize),
    measured: Option<&BTreeMap<String, f64>>,
    (work, given): (&Workload, Overrides),
) -> Result<JobPlan> {
    let (weights, weights_from) = weights(runs, measured);
    if let Some((id, _)) = weights.iter().find(|(id, _)| id.contains(';')) {
        return Err(bad_flag(format!(
            "target {id}: an id with ';' cannot be given its cost in --costs (';' separates them); rename its option"
        )));
    }
    let costs = Costs(weights.iter().cloned().collect());
    let shards = units(&weights, samples, count);
    refuse_idle_eval_shards(&format!("--shards {count}"), &shards, (samples, weights.len()))?;
    Ok(JobPlan {
        args,
        samples: Some(samples),
        sizing: size(work, &shards, given),
        shards,
        weights,
        weights_from,
        costs: Some(costs.to_flag()),
    })
}

/// A compare's jobs: its targets dealt to `count` shards as `compare --shard i/n` deals them (the
/// baseline in every shard), each target's weight its cost.
pub fn compare_jobs(
    args: Vec<String>,
    runs: &[Requested],
    count: usize,
    measured: Option<&BTreeMap<String, f64>>,
    (work, given): (&Workload, Overrides),
) -> Result<JobPlan> {
    let (weights, weights_from) = weights(runs, measured);
    let parts: Vec<Vec<Requested>> = (1..=count)
        .map(|index| Shard { index, count }.deal(runs.to_vec()).0)
        .collect();
    let idle = parts
        .iter()
        .filter(|p| p.iter().all(|r| r.role == TargetRole::Baseline))
        .count();
    let targets = runs.iter().filter(|r| r.role == TargetRole::Target).count();
    refuse_idle(
        &format!("--shards {count}"),
        (idle, count),
        format!("compare deals out its {targets} targets"),
    )?;
    let shards: Vec<Vec<Unit>> = parts
        .iter()
        .map(|mine| {
            mine.iter()
                .map(|r| Unit {
                    run: r.spec.id.clone(),
                    start: 0,
                    end: 1,
                })
                .collect()
        })
        .collect();
    Ok(JobPlan {
        args,
        samples: None,
        weights,
        weights_from,
        costs: None,
        sizing: size(work, &shards, given),
        shards,
    })
}

/// Refuses an eval's split (`shards`, of `samples` × `runs`) where some shard would get no work:
/// its file could never be merged. `plan --shards N` and `eval --shard I/N` say it alike; `given`
/// is the split as the user gave it.
pub fn refuse_idle_eval_shards(given: &str, shards: &[Vec<Unit>], (samples, runs): (usize, usize)) -> Result<()> {
    refuse_idle(
        given,
        (shards.iter().filter(|s| s.is_empty()).count(), shards.len()),
        format!("{samples} samples x {runs} runs: a slow run's sample costs more than an even share"),
    )
}

/// Refuses a split where `empty` of the `count` shards would get no work.
fn refuse_idle(given: &str, (empty, count): (usize, usize), what: String) -> Result<()> {
    if empty == 0 {
        return Ok(());
    }
    Err(bad_flag(format!(
        "{given}: {empty} of the {count} shards would get no work ({what}); give fewer shards"
    )))
}
