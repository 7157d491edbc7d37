//! Rules between two releases of one target (the policy's `[runtime]`): whether an upgrade
//! changes what the target outputs. Targets that differ only in their release
//! (`qnn:sm8650@2.6.0`, `qnn:sm8650@2.7.0`) are taken in release order, each against the one
//! before it.

use crate::execution::runtime::catalog::version_order;
use crate::judge::policy::ReleaseLimits;
use crate::report::common::Num;
use crate::report::compare::{AgreementEntry, TargetReport};
use crate::report::gate::{ReleaseLimit, Rule, RuleResult};
use crate::report::RunStatus;

/// The limits as the report keeps them.
pub fn limits_info(limits: &ReleaseLimits) -> Vec<ReleaseLimit> {
    let mut out = Vec::new();
    if let Some(l) = &limits.max_sqnr_change_db {
        out.push(ReleaseLimit {
            rule: Rule::ReleaseSqnrChangeDb,
            limit: Num(l.value),
            origin: l.origin.clone(),
        });
    }
    if let Some(l) = limits.require_bit_exact.as_ref().filter(|l| l.value) {
        out.push(ReleaseLimit {
            rule: Rule::ReleaseBitExact,
            limit: Num(0.0),
            origin: l.origin.clone(),
        });
    }
    out
}

/// The target's id without its release (`qnn:sm8650@2.6.0,x=y` -> `qnn:sm8650,x=y`).
fn without_release(id: &str) -> String {
    match id.split_once('@') {
        Some((head, rest)) => match rest.split_once(',') {
            Some((_, options)) => format!("{head},{options}"),
            None => head.to_string(),
        },
        None => id.to_string(),
    }
}

/// The release a target ran on: its plugin's version for a plugin EP, else its runtime's.
fn release_of(t: &TargetReport) -> Option<&str> {
    let rt = t.runtime.as_ref()?;
    Some(rt.plugin.as_ref().map_or(rt.version.as_str(), |p| p.version.as_str()))
}

/// Pairs of targets that differ only in their release, each with the one before it in release
/// order (only targets that ran).
fn release_pairs(targets: &[TargetReport]) -> Vec<(&TargetReport, &TargetReport)> {
    let mut groups: Vec<(String, Vec<&TargetReport>)> = Vec::new();
    for t in targets
        .iter()
        .filter(|t| t.status == RunStatus::Ok && release_of(t).is_some())
    {
        let key = without_release(&t.id);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(t),
            None => groups.push((key, vec![t])),
        }
    }
    let mut pairs = Vec::new();
    for (_, mut g) in groups {
        g.sort_by(|a, b| version_order(release_of(a).unwrap_or(""), release_of(b).unwrap_or("")));
        pairs.extend(g.windows(2).map(|w| (w[0], w[1])));
    }
    pairs
}

/// Every rule of `limits` on every pair of releases, per output.
pub fn rules(limits: &[ReleaseLimit], targets: &[TargetReport], agreement: &[AgreementEntry]) -> Vec<RuleResult> {
    let mut out = Vec::new();
    for (before, after) in release_pairs(targets) {
        for o in &after.outputs {
            let was = before.outputs.iter().find(|x| x.name == o.name);
            let entry = agreement.iter().find(|e| {
                e.output == o.name && ((e.a == before.id && e.b == after.id) || (e.a == after.id && e.b == before.id))
            });
            for l in limits {
                let (measured, previous) = match l.rule {
                    Rule::ReleaseSqnrChangeDb => {
                        let change = was.map_or(f64::NAN, |w| change_db(w.sqnr_db.0, o.sqnr_db.0));
                        (change, was.map(|w| w.sqnr_db))
                    }
                    _ => (
                        entry.and_then(|e| e.differing_elements).map_or(f64::NAN, |d| d as f64),
                        None,
                    ),
                };
                let origin = format!("{} vs {}", l.origin, before.id);
                let mut rule = RuleResult::judged(l.rule, &after.id, &o.name, (measured, l.limit.0), &origin);
                rule.previous = previous;
                out.push(rule);
            }
        }
    }
    out
}

/// How far an SQNR moved, in dB (equal infinities did not move).
fn change_db(before: f64, after: f64) -> f64 {
    if before == after {
        0.0
    } else {
        (after - before).abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_lose_only_their_release() {
        assert_eq!(without_release("qnn:sm8650@2.6.0"), "qnn:sm8650");
        assert_eq!(without_release("qnn:sm8650@2.6.0+ort1.30.0,a=b"), "qnn:sm8650,a=b");
        assert_eq!(without_release("cpu"), "cpu");
        assert_eq!(change_db(f64::INFINITY, f64::INFINITY), 0.0);
        assert_eq!(change_db(20.25, 21.75), 1.5);
    }
}
